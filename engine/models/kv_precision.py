"""The K/V storage precisions the engine offers besides the model's own dtype, and what a row of each costs:
torch-free (the what-if, `kvtui info --config` and the trace reader use it without the engine).

Scheme (vLLM's per-token-head quantization): every (token, KV head) row of K and of V is quantized on its own, with
one float32 scale, when it is written; attention dequantizes (value x scale) when it reads. int8 is symmetric,
scale = max |x| / 127, value = round(x / scale); fp8_e4m3 is float8 e4m3fn (OCP), scale = max |x| / 448, value =
x / scale rounded to the nearest e4m3. The scale sits inline after the row's head_dim bytes, so one row is
head_dim + 4 bytes, as in vLLM's int8_per_token_head / fp8_per_token_head caches; every copy of a row
(copy-on-write, ring row copies, snapshots) carries its scale without a second tensor to keep in step.
"""

from __future__ import annotations

# name -> the largest magnitude a stored value takes (scale = max |x| / this)
KV_DTYPES: dict[str, float] = {"int8": 127.0, "fp8_e4m3": 448.0}
# other spellings the options take
KV_DTYPE_ALIASES = {"fp8": "fp8_e4m3", "float8_e4m3fn": "fp8_e4m3", "e4m3": "fp8_e4m3"}
# bytes of the float32 scale stored with each row
SCALE_BYTES = 4
# what `--kv-dtype` accepts (None, the default: the model's own dtype, exact)
KV_DTYPE_CHOICES = ("int8", "fp8_e4m3", "fp8")


def normalize_kv_dtype(kv_dtype: str | None) -> str | None:
    """The canonical name of a K/V precision ('fp8' -> 'fp8_e4m3'); None stays None (exact)."""
    if kv_dtype is None:
        return None
    name = KV_DTYPE_ALIASES.get(str(kv_dtype).lower(), str(kv_dtype).lower())
    if name not in KV_DTYPES:
        raise ValueError(
            f"kv_dtype must be None (the model's dtype), {', '.join(map(repr, KV_DTYPES))} or 'fp8' "
            f"(got {kv_dtype!r})"
        )
    return name


def row_bytes(head_dim: int, elem_bytes: float, kv_dtype: str | None) -> float:
    """Bytes of one (token, KV head) row of K or of V: head_dim elements, plus the scale when quantized."""
    if kv_dtype is None:
        return head_dim * elem_bytes
    return head_dim + SCALE_BYTES


def describe_row(head_dim: int, elem_bytes: float, kv_dtype: str | None) -> str:
    """What one row of a block holds, in words (`kvtui info`, the pool view)."""
    if kv_dtype is None:
        return f"{head_dim} x {elem_bytes:g} B"
    return f"({head_dim} x 1 B {kv_dtype} + a {SCALE_BYTES} B float32 scale)"
