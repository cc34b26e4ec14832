"""`kvtui bench long`: long-context prefill and decode of our engine against transformers, in the same run.

The model is tiny (a random 2-layer Llama, 4 query and 2 KV heads, nothing downloaded), so the model's own
matrix work is cheap and what the engine adds around attention shows. Baselines:
    prefill N   transformers' forward of the N tokens without a cache (its causal SDPA), last logits only
    decode      one token after an N-token prompt: transformers' forward with its DynamicCache, token by token
                (generate's inner loop without generate's own per-token work: a stricter baseline)
Engine and baseline alternate inside every repeat, and the ratio is the median of the per-repeat ratios
(machines are noisy: the spread of those ratios is reported too).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from engine.core.request import SamplingParams
from engine.models.loading import stock_attention


def tiny_llama(max_positions: int, hidden: int = 64, layers: int = 2, seed: int = 0):
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=256,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
    )
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


@dataclass
class Pair:
    work: str
    # seconds per repeat
    baseline: list[float]
    engine: list[float]

    @property
    def ratios(self) -> list[float]:
        return [e / b for e, b in zip(self.engine, self.baseline)]

    @property
    def ratio(self) -> float:
        return statistics.median(self.ratios)


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


@torch.inference_mode()
def _hf_prefill(model, ids: torch.Tensor) -> None:
    with stock_attention(model):
        model(ids, use_cache=False, logits_to_keep=1)


def _engine(model, max_batched_tokens: int):
    from engine.engine import Engine, EngineConfig

    longest = model.config.max_position_embeddings
    config = EngineConfig(
        prefix_cache=False, block_size=16, num_blocks=longest // 16 + 8, max_batched_tokens=max_batched_tokens
    )
    return Engine.from_model(model, config=config)


def run_long_context(
    prefill_lengths=(2048, 8192, 16384),
    decode_after: int = 8192,
    decode_tokens: int = 32,
    repeats: int = 3,
    max_batched_tokens: int = 512,
    progress: Callable[[str], None] = lambda msg: None,
) -> list[Pair]:
    longest = max([*prefill_lengths, decode_after + (decode_tokens + 1) * repeats + 1])
    model = tiny_llama(longest + 16)
    engine = _engine(model, max_batched_tokens)
    generator = torch.Generator().manual_seed(11)
    one = SamplingParams(max_tokens=1, ignore_eos=True)
    progress("warming up")
    warm = torch.randint(3, 256, (min(256, *prefill_lengths),), generator=generator).tolist()
    engine.generate([warm], one)
    _hf_prefill(model, torch.tensor([warm]))
    pairs = []
    for n in prefill_lengths:
        prompt = torch.randint(3, 256, (n,), generator=generator).tolist()
        ids = torch.tensor([prompt])
        pair = Pair(f"prefill {n:,} tokens", [], [])
        for r in range(repeats):
            progress(f"prefill {n}: repeat {r + 1}/{repeats}")
            pair.baseline.append(_timed(lambda ids=ids: _hf_prefill(model, ids)))
            pair.engine.append(_timed(lambda prompt=prompt: engine.generate([prompt], one)))
        pairs.append(pair)
    pairs.append(
        _decode_pair(
            model,
            engine,
            torch.randint(3, 256, (decode_after,), generator=generator).tolist(),
            decode_tokens,
            repeats,
            progress,
        )
    )
    return pairs


@torch.inference_mode()
def _decode_pair(model, engine, prompt: list[int], tokens: int, repeats: int, progress) -> Pair:
    """Seconds per decoded token after `prompt`: engine steps vs transformers' forward with its DynamicCache
    (the loop inside generate, without generate's own per-token work), both cut back to the prompt each repeat."""
    from transformers import DynamicCache

    pair = Pair(f"decode after {len(prompt):,} (per token)", [], [])
    with stock_attention(model):
        cache = DynamicCache(config=model.config)
        model(torch.tensor([prompt]), past_key_values=cache, use_cache=True, logits_to_keep=1)
    rid = engine.submit(prompt, SamplingParams(max_tokens=(tokens + 1) * repeats + 1, ignore_eos=True))
    while engine.requests[rid].num_computed < len(prompt):
        # the prefill; every later step decodes one token
        engine.step()
    next_id = torch.tensor([[prompt[-1]]])
    for r in range(repeats):
        progress(f"decode after {len(prompt)}: repeat {r + 1}/{repeats}")
        extra = cache.get_seq_length() - len(prompt)
        if extra:
            cache.crop(-extra)
        start = time.perf_counter()
        with stock_attention(model):
            for i in range(tokens):
                logits = model(
                    next_id,
                    past_key_values=cache,
                    use_cache=True,
                    position_ids=torch.tensor([[len(prompt) + i]]),
                ).logits
                next_id = logits[:, -1:].argmax(-1)
        pair.baseline.append((time.perf_counter() - start) / tokens)
        start = time.perf_counter()
        for _ in range(tokens):
            engine.step()
        pair.engine.append((time.perf_counter() - start) / tokens)
    engine.abort(rid)
    return pair


def format_long_context(pairs: list[Pair]) -> str:
    head = f"{'work':<30} {'transformers ms':>15} {'engine ms':>10} {'ratio':>6}  {'ratio range':>12}"
    lines = [head, "-" * len(head)]
    for p in pairs:
        lo, hi = min(p.ratios), max(p.ratios)
        lines.append(
            f"{p.work:<30} {statistics.median(p.baseline) * 1000:>15.1f} "
            f"{statistics.median(p.engine) * 1000:>10.1f} {p.ratio:>6.2f}  {lo:>5.2f}-{hi:<5.2f}"
        )
    lines.append("ratio = engine / transformers, median of per-repeat ratios (target <= 1.2)")
    return "\n".join(lines)
