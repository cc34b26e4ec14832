"""`kvtui precision [TEXT]`: what 8-bit K/V (EngineConfig.kv_dtype) cost the answer, against the exact cache, on
our models and a text (kvtui/commands/precision_run.py runs it).

Per K/V precision: bytes per token, the KL divergence of each position's next-token distribution from the exact
cache's (mean and 99th percentile), how often the most likely next token changes (per 1,000 positions), the
text's perplexity, and the layer whose output's relative error grows most. `--trace OUT` writes one precision's
engine trace with a `kv_divergence` event per step: `kvtui replay OUT` colours each token by its KL.
"""

from __future__ import annotations

import math
from pathlib import Path

import click

from engine.models.kv_precision import KV_DTYPES, normalize_kv_dtype
from kvtui.commands.output_path import output_file
from kvtui.commands.precision_run import EXACT, PrecisionCost


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) by nearest rank."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def perplexity(logprobs: list[float]) -> float:
    return math.exp(-sum(logprobs) / len(logprobs)) if logprobs else float("nan")


def format_costs(costs: list[PrecisionCost], model_dtype: str) -> str:
    exact = costs[0]
    head = (
        f"{'K/V':<10} {'bytes/token':>11} {'capacity':>11} {'mean KL':>9} {'p99 KL':>9} "
        f"{'top-1 flips/1k':>14} {'ppl':>8}  error grows most at"
    )
    lines = [head, "-" * len(head)]
    for cost in costs:
        name = f"{model_dtype}" if cost.kv_dtype == EXACT else cost.kv_dtype
        gain = exact.bytes_per_token / cost.bytes_per_token if cost.bytes_per_token else float("nan")
        if cost.kv_dtype == EXACT:
            stats = f"{'-':>9} {'-':>9} {'-':>14}"
            worst = "(the exact cache)"
        else:
            flips = 1000 * len(cost.flips) / len(cost.kl) if cost.kl else float("nan")
            mean = sum(cost.kl) / len(cost.kl) if cost.kl else float("nan")
            stats = f"{mean:>9.2e} {percentile(cost.kl, 99):>9.2e} {flips:>14.1f}"
            layer = cost.worst_layer()
            worst = (
                f"layer {layer[0]} (+{layer[1]:.2e}; last layer {cost.layer_errors()[-1]:.2e})"
                if layer
                else "-"
            )
        lines.append(
            f"{name:<10} {cost.bytes_per_token:>11,} {gain:>10.2f}x {stats} {perplexity(cost.logprobs):>8.3f}  "
            f"{worst}"
        )
    lines.append(
        "KL: of each position's next-token distribution from the exact cache's (nats); flips: positions whose "
        "most likely next token changed; error: ||h - h_exact|| / ||h_exact|| of the residual stream after "
        "each layer, the layer where it rises most (and after the last)."
    )
    return "\n".join(lines)


@click.command("precision")
@click.argument("text", required=False, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--model", "-m", default="smollm2", show_default=True, help="smollm2, gemma3, or any model kvtui loads."
)
@click.option("--device", default="cpu", show_default=True)
@click.option(
    "--kv-dtype",
    "kv_dtypes",
    multiple=True,
    type=click.Choice([*KV_DTYPES, "fp8"]),
    help="A precision to measure; repeat for several [int8 and fp8_e4m3].",
)
@click.option(
    "--tokens", type=click.IntRange(min=16), default=1024, show_default=True, help="Score this many tokens."
)
@click.option(
    "--chunk", type=click.IntRange(min=2), default=256, show_default=True, help="Tokens per prefill chunk."
)
@click.option("--threads", type=click.IntRange(min=1), default=None, help="torch CPU threads.")
@click.option(
    "--trace",
    "trace_path",
    type=click.Path(dir_okay=False),
    callback=output_file,
    help="Write the first precision's engine trace with its KL per token, for `kvtui replay`.",
)
def precision(text, model, device, kv_dtypes, tokens, chunk, threads, trace_path):
    """What int8 and fp8 K/V cost the answer: each precision against the exact cache on one text.

    TEXT is a plain-text file (default: Python's own language reference, as `kvtui sinks`). The text runs
    through one engine per precision in prefill chunks; every position's next-token distribution is compared.

    \b
    Examples:
      kvtui precision                               SmolLM2, int8 and fp8, 1,024 tokens
      kvtui precision -m gemma3 --tokens 2048
      kvtui precision --kv-dtype int8 --trace kv.jsonl && kvtui replay kv.jsonl
    """
    import torch

    from kvtui.commands.precision_run import measure
    from kvtui.commands.sinks_commands import model_and_text

    if threads:
        torch.set_num_threads(threads)
    wanted = list(dict.fromkeys(normalize_kv_dtype(d) for d in kv_dtypes)) or list(KV_DTYPES)
    hf_model, tokenizer, name, token_ids = model_and_text(model, device, text, tokens)
    if len(token_ids) < 2:
        raise click.UsageError(f"the text has {len(token_ids)} tokens: it needs at least 2")
    source = str(text) if text else "Python's language reference (pydoc_data.topics)"

    def say(message):
        click.echo(message, err=True)

    costs = measure(hf_model, tokenizer, name, token_ids, wanted, chunk, trace_path, wanted[0], say)
    click.echo(
        f"K/V precision on {name}, {len(token_ids)} tokens of {source}, prefill chunks of {chunk}: each "
        f"against the exact ({str(next(hf_model.parameters()).dtype).removeprefix('torch.')}) cache"
    )
    click.echo(format_costs(costs, str(next(hf_model.parameters()).dtype).removeprefix("torch.")))
    if trace_path:
        click.echo(
            f"trace: {trace_path} ({wanted[0]}): kvtui replay {trace_path}, the token strip colours KL"
        )


COMMANDS = [precision]
