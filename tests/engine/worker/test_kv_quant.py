"""engine/worker/kv_quant.py and the C decode kernel's 8-bit reads: per-(token, KV head) int8 / fp8 e4m3 rows against
the reference written from the formats' definitions (tests/helpers/quantized_reference.py), and the kernel's
attention over 8-bit rows against the attention of the same dequantized tensors."""

from __future__ import annotations

import math

import pytest
import torch

from engine.models.kv_precision import normalize_kv_dtype, row_bytes
from engine.worker.kernels import kv_quantize
from engine.worker.kernels import paged_decode as kernel
from engine.worker.kv_quant import KVQuantizer
from engine.worker.sdpa import attend
from tests.helpers.quantized_reference import reference_round_trip

KV_DTYPES = ["int8", "fp8_e4m3"]
needs_kernel = pytest.mark.skipif(not kernel.available(), reason=f"no decode kernel here: {kernel.why_not()}")


def rows(seed: int, shape=(5, 3, 64), dtype=torch.float32) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    # magnitudes over six orders, an all-zero row and one outlier per row, as K/V have
    x = torch.randn(shape, generator=generator) * 10.0 ** torch.randint(
        -3, 3, shape[:-1] + (1,), generator=generator
    )
    x[0, 0] = 0
    x[..., 7] *= 50
    return x.to(dtype)


@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_quantize_then_dequantize_is_the_reference(kv_dtype, dtype):
    x = rows(0, dtype=dtype)
    quant = KVQuantizer(kv_dtype)
    stored = quant.quantize(x)
    assert stored.dtype == torch.uint8 and stored.shape == (5, 3, 64 + 4)
    assert torch.equal(quant.dequantize(stored, dtype), reference_round_trip(x, kv_dtype))
    # the row's scale in its last 4 bytes: max |x| / the format's largest value (an all-zero row: 1)
    scale = stored[..., 64:].contiguous().view(torch.float32)[..., 0]
    largest = {"int8": 127.0, "fp8_e4m3": 448.0}[kv_dtype]
    expected = x.float().abs().amax(-1) / largest
    assert torch.equal(scale, torch.where(expected == 0, torch.ones_like(expected), expected))
    assert not quant.dequantize(stored)[0, 0].any()


@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
def test_the_error_is_within_half_a_step_of_each_row(kv_dtype):
    x = rows(1)
    back = KVQuantizer(kv_dtype).round_trip(x)
    amax = x.abs().amax(-1, keepdim=True)
    if kv_dtype == "int8":
        # half of one step of 1/127 of the row's largest value
        assert ((back - x).abs() <= amax / 127 / 2 * 1.0001 + 1e-30).all()
    else:
        # 3 mantissa bits: half a unit in the last place, 1/16 relative, above e4m3's subnormals
        normal = x.abs() >= amax / 448 * 2.0**-6
        assert ((back - x).abs()[normal] <= x.abs()[normal] / 16 * 1.0001).all()


def test_names_and_bytes_of_a_row():
    assert normalize_kv_dtype("fp8") == "fp8_e4m3" and normalize_kv_dtype(None) is None
    with pytest.raises(ValueError, match="kv_dtype"):
        normalize_kv_dtype("int4")
    assert row_bytes(64, 4, None) == 256 and row_bytes(64, 2, "int8") == 68 == row_bytes(64, 4, "fp8_e4m3")


def gathered(x: torch.Tensor, tables: torch.Tensor, lengths: torch.Tensor, block_size: int, i: int):
    """Sequence i's slots of a layer's [Hkv, slots, D]."""
    slots = [b * block_size + o for b in tables[i].tolist() for o in range(block_size)][: lengths[i]]
    return x[:, slots]


def kernel_case(seed, n, hkv, groups, dim, block_size, lengths, blocks=120):
    generator = torch.Generator().manual_seed(seed)
    keys = torch.randn(hkv, blocks * block_size, dim, generator=generator) * 3
    values = torch.randn(hkv, blocks * block_size, dim, generator=generator)
    q = torch.randn(n, hkv, groups, dim, generator=generator)
    width = max(-(-length // block_size) for length in lengths) + 1
    tables = torch.stack([torch.randperm(blocks, generator=generator)[:width] for _ in range(n)])
    return q, keys, values, tables, torch.tensor(lengths)


@needs_kernel
@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
@pytest.mark.parametrize(
    "n, hkv, groups, dim, block_size, lengths, window, softcap",
    [
        # SmolLM2's heads, one sequence split across the threads
        (4, 3, 3, 64, 16, [525, 1, 17, 300], None, None),
        (1, 3, 3, 64, 16, [700], None, None),
        # Gemma 3 270M's: one KV head of 4 query heads, 256 wide
        (2, 1, 4, 256, 16, [90, 33], None, None),
        # a head size that is no multiple of 16, blocks of 1, a window, soft-capped scores
        (3, 2, 2, 40, 1, [5, 90, 1], 37, 30.0),
        (2, 2, 1, 24, 32, [700, 31], None, 5.0),
    ],
)
def test_kernel_over_8bit_rows_is_sdpa_over_the_dequantized_rows(
    kv_dtype, n, hkv, groups, dim, block_size, lengths, window, softcap
):
    q, keys, values, tables, lengths = kernel_case(0, n, hkv, groups, dim, block_size, lengths)
    quant = KVQuantizer(kv_dtype)
    k_stored, v_stored = quant.quantize(keys), quant.quantize(values)
    scale = 1 / math.sqrt(dim)
    ours = kernel.paged_decode(
        q, k_stored, v_stored, tables, lengths, block_size, scale, window, softcap, kv_dtype=kv_dtype
    )
    k_read, v_read = quant.dequantize(k_stored), quant.dequantize(v_stored)
    for i in range(n):
        k, v = (gathered(t, tables, lengths, block_size, i) for t in (k_read, v_read))
        if window:
            k, v = k[:, -window:], v[:, -window:]
        # [1, Hq, 1, D] with GQA: the KV head's query heads
        expected = attend(q[i].reshape(1, hkv * groups, 1, dim), k[None], v[None], None, scale, softcap)
        assert (ours[i].reshape(-1, dim) - expected.reshape(-1, dim)).abs().max().item() <= 1e-5


@needs_kernel
@pytest.mark.parametrize("dim", [64, 40])
def test_kernel_reads_every_fp8_code_as_torch_does(dim):
    """Every e4m3fn code but NaN (0x7F, 0xFF) as a value row read alone (one position: the row itself): the vector
    conversion (whole groups of 16) and the scalar one (the tail of a 40-wide row)."""
    codes = torch.tensor([c for c in range(256) if c & 0x7F != 0x7F], dtype=torch.uint8)
    per_row = codes.numel() // dim + 1
    padded = torch.cat([codes, codes[: per_row * dim - codes.numel()]]).view(per_row, dim)
    scale = torch.full((per_row, 1), 0.5).view(torch.uint8)
    values = torch.cat([padded, scale], dim=-1)[None].contiguous()
    keys = torch.zeros_like(values)
    tables = torch.arange(per_row)[:, None]
    out = kernel.paged_decode(
        torch.zeros(per_row, 1, 1, dim),
        keys,
        values,
        tables,
        torch.ones(per_row, dtype=torch.long),
        1,
        1.0,
        kv_dtype="fp8_e4m3",
    )
    expected = padded.view(torch.float8_e4m3fn).float() * 0.5
    assert torch.equal(out.reshape(per_row, dim), expected)


@needs_kernel
def test_kernel_refuses_rows_of_the_wrong_width_or_type():
    q, keys, values, tables, lengths = kernel_case(2, 1, 1, 1, 64, 16, [20])
    with pytest.raises(ValueError, match="uint8"):
        kernel.paged_decode(q, keys, values, tables, lengths, 16, 0.1, kv_dtype="int8")
    stored = KVQuantizer("int8").quantize(keys)
    with pytest.raises(ValueError, match="68"):
        kernel.paged_decode(
            q,
            stored[..., :-1].contiguous(),
            stored[..., :-1].contiguous(),
            tables,
            lengths,
            16,
            0.1,
            kv_dtype="int8",
        )


needs_writer = pytest.mark.skipif(
    not kv_quantize.available(), reason=f"no C quantizer here: {kv_quantize.why_not()}"
)


@needs_writer
@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
def test_the_c_writer_gives_torchs_bits(kv_dtype):
    """Rows of six orders of magnitude (float32 subnormals after scaling among them), as a decode writes them:
    [Hkv, N, D] views of [N, Hkv, D], into scattered slots."""
    quant = KVQuantizer(kv_dtype)
    for seed in range(10):
        x = rows(seed, shape=(7, 3, 64))
        x[1, 1, 5] = 1e-30
        generator = torch.Generator().manual_seed(seed)
        slots = torch.randperm(50, generator=generator)[:7]
        pool, expected = (torch.zeros(3, 50, 68, dtype=torch.uint8) for _ in range(2))
        kv_quantize.quantize_write(x.transpose(0, 1), slots, pool, kv_dtype)
        expected[:, slots] = quant.quantize(x.transpose(0, 1))
        assert torch.equal(pool, expected), seed


@needs_writer
@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
def test_the_c_writer_fills_ring_slots_as_torchs_indexing_does(kv_dtype):
    """A ring layer's [ring rows, S + W, Hkv, D + 4]: rows written at (ring row, slot) pairs."""
    x = rows(3, shape=(5, 2, 32))
    ring_rows, ring_slots = torch.tensor([0, 2, 2, 1, 0]), torch.tensor([3, 0, 5, 5, 1])
    ring, expected = (torch.zeros(3, 6, 2, 36, dtype=torch.uint8) for _ in range(2))
    kv_quantize.quantize_write_ring(x, ring_rows * 6 + ring_slots, ring, kv_dtype)
    expected[ring_rows, ring_slots] = KVQuantizer(kv_dtype).quantize(x)
    assert torch.equal(ring, expected)
    with pytest.raises(ValueError, match="outside"):
        kv_quantize.quantize_write_ring(x[:1], torch.tensor([18]), ring, kv_dtype)


@needs_writer
def test_the_c_writer_rounds_every_e4m3_tie_as_torch_does():
    """A row whose largest value is 448 has scale 1: its values are converted as they are. Every midpoint of two
    neighbouring e4m3 values (a tie), and a float either side of it."""
    values = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    finite = values[values.isfinite() & (values >= 0)].sort().values
    middle = (finite[1:] + finite[:-1]) / 2
    around = torch.cat([middle, middle.nextafter(torch.tensor(0.0)), middle.nextafter(torch.tensor(500.0))])
    around = torch.cat([around, -around])
    width = 63
    padded = torch.cat([around, torch.zeros(-len(around) % width)]).view(-1, width)
    x = torch.cat([torch.full((len(padded), 1), 448.0), padded], dim=1)[:, None]
    pool = torch.zeros(1, len(x), 68, dtype=torch.uint8)
    kv_quantize.quantize_write(x.transpose(0, 1), torch.arange(len(x)), pool, "fp8_e4m3")
    assert torch.equal(pool[0], KVQuantizer("fp8_e4m3").quantize(x[:, 0]))
    assert torch.equal(pool[0, :, :64].view(torch.float8_e4m3fn), x[:, 0].to(torch.float8_e4m3fn))


@needs_writer
def test_the_c_writer_refuses_a_slot_outside_the_pool():
    with pytest.raises(ValueError, match="outside"):
        kv_quantize.quantize_write(
            torch.ones(1, 1, 64), torch.tensor([9]), torch.zeros(1, 4, 68, dtype=torch.uint8), "int8"
        )


@needs_kernel
def test_the_decode_bench_times_every_precision():
    from engine.worker.kernels.decode_bench import PRECISIONS, compare, format_rows

    rows = compare(contexts=(40,), layers=2, kv_heads=1, groups=2, dim=16, rounds=2)
    assert rows[0][0] == 40 and set(rows[0][1]) == set(PRECISIONS)
    assert "fp8_e4m3" in format_rows(rows) and "1.00x" in format_rows(rows)
