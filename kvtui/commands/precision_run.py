"""What 8-bit K/V cost the answer (`kvtui precision`): one text through an engine per K/V precision, step by step
together, each position's next-token distribution against the exact cache's.

Every engine scores the same prompt in the same prefill chunks (SamplingParams(prompt_logprobs=True) keeps
every row's logits), so step k of each is the same positions. A chunk attends to its own K/V as stored (dequantized),
as every later decode reads them, so a position's distribution is what a decode there would give. Each decoder
layer's output (the residual stream) is compared too: the relative error ||h_q - h|| / ||h|| after each layer,
and the layer where it grows most.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field

# a KV precision's name in the table and trace when K/V are stored exactly
EXACT = "exact"


@dataclass
class PrecisionCost:
    """One precision's cost against the exact cache, over the text's positions."""

    kv_dtype: str
    bytes_per_token: int
    # per position predicting a next token: KL(exact || this) of the next-token distribution, nats
    kl: list[float] = field(default_factory=list)
    # positions whose most likely next token differs from the exact cache's
    flips: list[int] = field(default_factory=list)
    # log-probability of each actual next token
    logprobs: list[float] = field(default_factory=list)
    # per layer: sum of ||h_q - h||^2 and of ||h||^2 over the positions (the residual stream after the layer)
    error_sq: list[float] = field(default_factory=list)
    norm_sq: list[float] = field(default_factory=list)

    def layer_errors(self) -> list[float]:
        return [(e / n) ** 0.5 if n else 0.0 for e, n in zip(self.error_sq, self.norm_sq)]

    def worst_layer(self) -> tuple[int, float] | None:
        """(layer, growth): the layer whose output's relative error exceeds its input's by the most."""
        errors = self.layer_errors()
        if not errors:
            return None
        growth = [b - a for a, b in zip([0.0] + errors[:-1], errors)]
        layer = max(range(len(growth)), key=growth.__getitem__)
        return layer, growth[layer]


class _Capture:
    """The scored logits rows of an engine's last step, and each decoder layer's output during it."""

    def __init__(self, engine):
        self.rows = None
        self.hidden: list = []
        runner = engine.runner
        forward = runner.forward

        def capturing(chunks, all_logits=False, scored=frozenset()):
            logits = forward(chunks, all_logits, scored)
            self.rows = logits if scored else None
            return logits

        runner.forward = capturing


def measure(
    model,
    tokenizer,
    name,
    token_ids,
    kv_dtypes,
    chunk: int = 256,
    trace_path=None,
    trace_dtype=None,
    say=print,
) -> list[PrecisionCost]:
    """The cost of each of `kv_dtypes` against the exact cache (first in the list: the exact one, its own
    perplexity and bytes). trace_path: the `trace_dtype` engine's trace, with a `kv_divergence` event per step."""
    from engine.engine import Engine, EngineConfig, SamplingParams
    from engine.worker.fused_fit import decoder_layers

    n = len(token_ids)
    device = str(next(model.parameters()).device)
    engines, captures = {}, {}
    for kv_dtype in [EXACT, *kv_dtypes]:
        config = EngineConfig(
            device=device,
            num_blocks=n // 16 + 8,
            max_batched_tokens=chunk,
            prefix_cache=False,
            kv_dtype=None if kv_dtype == EXACT else kv_dtype,
        )
        engines[kv_dtype] = Engine(model, tokenizer, config, name)
        captures[kv_dtype] = _Capture(engines[kv_dtype])
    costs = {
        d: PrecisionCost(d, engines[d].shape.kv_bytes_per_token(), norm_sq=[], error_sq=[]) for d in engines
    }
    traced = engines.get(trace_dtype) if trace_path else None
    if traced is not None:
        traced.add_trace_file(trace_path)
    # each decoder layer's output, into the capture of the engine stepping
    stepping: list[_Capture] = []

    def keep_output(module, args, output):
        hidden = output[0] if isinstance(output, tuple) else output
        stepping[0].hidden.append(hidden[0].detach().float())

    hooks = [layer.register_forward_hook(keep_output) for layer in decoder_layers(model)]
    # the fused step calls no layer's forward: every step through the modules, where the hooks see it
    modules = ExitStack()
    for engine in engines.values():
        modules.enter_context(engine.runner.through_modules("kvtui precision hooks the decoder layers"))
    params = SamplingParams(max_tokens=1, ignore_eos=True, prompt_logprobs=True)
    ids = {d: e.submit(token_ids, params, request_id="text") for d, e in engines.items()}
    start = 0
    try:
        while engines[EXACT].has_unfinished():
            for d, engine in engines.items():
                capture = captures[d]
                capture.hidden = []
                stepping[:] = [capture]
                engine.step()
            rows = captures[EXACT].rows
            if rows is None:
                break
            count = rows.shape[0]
            say(f"positions {start}-{start + count - 1} of {n}")
            _compare(costs, captures, token_ids, start, count, traced, ids)
            start += count
    finally:
        modules.close()
        for hook in hooks:
            hook.remove()
        for engine in engines.values():
            engine.close()
    return list(costs.values())


def _compare(costs, captures, token_ids, start, count, traced, ids) -> None:
    """Fold one step's rows (positions start .. start + count - 1) into every precision's cost."""
    import torch

    exact = captures[EXACT]
    log_exact = torch.log_softmax(exact.rows.float(), -1)
    # rows whose next token is in the text
    targets = torch.tensor(token_ids[start + 1 : start + count + 1])
    scored = len(targets)
    top_exact = log_exact.argmax(-1)
    for d, cost in costs.items():
        capture = captures[d]
        log_q = torch.log_softmax(capture.rows.float(), -1)
        cost.logprobs += log_q[torch.arange(scored), targets].tolist()
        if d == EXACT:
            continue
        kl = (log_exact.exp() * (log_exact - log_q)).sum(-1).clamp(min=0)[:scored]
        changed = (log_q.argmax(-1) != top_exact)[:scored].nonzero()[:, 0]
        cost.kl += kl.tolist()
        cost.flips += (changed + start).tolist()
        if not cost.error_sq:
            cost.error_sq, cost.norm_sq = [0.0] * len(exact.hidden), [0.0] * len(exact.hidden)
        for layer, (h_q, h) in enumerate(zip(capture.hidden, exact.hidden)):
            cost.error_sq[layer] += (h_q - h).pow(2).sum().item()
            cost.norm_sq[layer] += h.pow(2).sum().item()
        if traced is not None and d == traced.config.kv_dtype:
            traced.trace.emit(
                "kv_divergence",
                request_id=ids[d],
                kv_dtype=d,
                start=start,
                kl=[round(v, 7) for v in kl.tolist()],
                top1_changed=(changed + start).tolist(),
            )
