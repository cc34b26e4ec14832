"""`kvtui sinks [TEXT]`: StreamingLLM's perplexity experiment (Xiao et al. 2023, Table 1) on our models and text.

Every token of the text is scored through the engine's own cache (Engine.score: exact, engine/worker/scoring.py)
under four caches of one budget W, plus two baselines:
    dense          the model's own attention (SmolLM2: full; Gemma 3: its 15 window layers + 3 full layers)
    window         every layer keeps the last W positions (the rings; Gemma's 3 full layers forced to W)
    sinks          the first S positions + the last W - S (EngineConfig(sink_tokens=S, window=W - S))
    heavy hitters  H2O: W/2 recent keys + the W/2 with the most accumulated attention, per KV head and layer
                   (an eager masked forward, engine/worker/heavy_hitters.py: the experiment only)
    recompute      sliding window with re-computation: each sampled position is predicted from a fresh forward
                   of its last W tokens (slow: sampled)
Positions are the text's (the rings keep RoPE at each token's own position), not StreamingLLM's positions
inside the cache, so the text stays within the model's context. `--trace OUT` also writes the window, sinks and
heavy-hitter caches as they advance, for `kvtui replay OUT`'s rings (kvtui/commands/sinks_trace.py).
"""

from __future__ import annotations

import math
from pathlib import Path

import click

from kvtui.commands.engine_options import check_device
from kvtui.commands.output_path import output_file
from kvtui.commands.sinks_trace import (
    default_every,
    query_positions,
    sample_ends,
    sinks_trace,
    write_trace,
)

METHODS = ("dense", "window", "sinks", "heavy hitters", "recompute")
MARKS = {"dense": "D", "window": "W", "sinks": "S", "heavy hitters": "H", "recompute": "R"}
# the model's own window where it has one, else 256
DEFAULT_WINDOW = {"smollm2": 256, "gemma3": 512}


def model_and_text(model: str, device: str, text, tokens: int):
    """The model in float32 and the first `tokens` token ids of the text (default: reference_text()), at most
    the model's positions: (model, tokenizer, name, token ids)."""
    from engine.models.loading import ModelLoadError, load_model

    body = text.read_text(encoding="utf-8") if text else reference_text()
    try:
        hf_model, tokenizer, name = load_model(model, device=device, dtype="float32")
    except ModelLoadError as exc:
        raise click.ClickException(str(exc)) from None
    # a random model (random:ARCH:SIZE) has no tokenizer: the text's UTF-8 bytes are its token ids
    encoded = tokenizer(body)["input_ids"] if tokenizer is not None else list(body.encode("utf-8"))
    token_ids = [t % hf_model.config.vocab_size for t in encoded][:tokens]
    limit = getattr(hf_model.config, "max_position_embeddings", None)
    return hf_model, tokenizer, name, token_ids[:limit] if limit else token_ids


def reference_text() -> str:
    """Long English already installed with Python: the language reference's topics (pydoc_data), in order."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[key] for key in sorted(topics))


def run_experiment(
    model,
    tokenizer,
    name,
    token_ids,
    window,
    sinks,
    samples,
    heavy_hitters=True,
    say=print,
    trace_layer=None,
    trace_at=(),
):
    """{method: (positions, logprobs)} over tokens 1.. of `token_ids` (recompute: the sampled positions), and
    "_kept" (the HeavyHitterRun: with `trace_layer`, that layer's kept sets at the queries `trace_at`),
    "_header" (the sinks engine's trace header) and "_texts" (each token's text)."""
    import torch

    from engine.engine import Engine, EngineConfig
    from engine.models.loading import stock_attention
    from engine.worker.heavy_hitters import heavy_hitter_logprobs

    n = len(token_ids)
    positions = list(range(1, n))
    results = {}
    configs = {
        "dense": {},
        "window": dict(window=window),
        "sinks": dict(window=window - sinks, sink_tokens=sinks),
    }
    for method, extra in configs.items():
        say(f"{method}: scoring {n} tokens through the engine's cache")
        config = EngineConfig(
            device=str(next(model.parameters()).device),
            num_blocks=n // 16 + 8,
            max_batched_tokens=256,
            prefix_cache=False,
            **extra,
        )
        engine = Engine(model, tokenizer, config, name)
        score = engine.score(token_ids)
        results[method] = (positions, score.logprobs[1:])
        if method == "sinks":
            results["_header"] = engine.trace.header
            results["_texts"] = [engine.token_text(t) for t in token_ids]
    if heavy_hitters:
        say(
            f"heavy hitters: one eager forward of {n} tokens, {window // 2} heavy + {window - window // 2} recent"
        )
        logprobs, run = heavy_hitter_logprobs(
            model, token_ids, window // 2, window - window // 2, trace_layer, trace_at
        )
        results["heavy hitters"] = (positions, logprobs.tolist())
        results["_kept"] = run
    # recompute: predict token p + 1 from tokens p - W + 1 .. p, at positions spread over [W, n - 1)
    sampled = (
        sorted({window + (n - 1 - window) * i // samples for i in range(samples)}) if n > window + 1 else []
    )
    say(f"recompute: {len(sampled)} sampled positions, a {window}-token forward each")
    values = []
    device = next(model.parameters()).device
    with stock_attention(model), torch.inference_mode():
        for i in range(0, len(sampled), 8):
            group = sampled[i : i + 8]
            ids = torch.tensor([token_ids[p - window + 1 : p + 1] for p in group], device=device)
            logits = model(ids, use_cache=False, logits_to_keep=1).logits[:, -1].float()
            target = torch.tensor([token_ids[p + 1] for p in group], device=device)[:, None]
            values += (logits.gather(1, target)[:, 0] - torch.logsumexp(logits, -1)).tolist()
    results["recompute"] = ([p + 1 for p in sampled], values)
    return results


def perplexity(values) -> float:
    return math.exp(-sum(values) / len(values)) if values else float("nan")


def at(result, wanted: set[int]) -> list[float]:
    positions, values = result
    return [v for p, v in zip(positions, values) if p in wanted]


def format_table(results, window, sinks, n, name, hybrid=False) -> str:
    """StreamingLLM's Table 1 form: the cache (initial + recent) and its perplexity."""
    late = set(range(window + 1, n))
    sampled = set(results["recompute"][0])
    dense_late = perplexity(at(results["dense"], late))
    rows = [
        ("dense", f"{'as trained' if hybrid else 'full'} ({n} tokens)"),
        ("window", f"0 + {window}"),
        ("sinks", f"{sinks} + {window - sinks}"),
        ("heavy hitters", f"{window // 2} heavy + {window - window // 2} recent"),
        ("recompute", f"0 + {window}, recomputed"),
    ]
    head = f"{'method':<14} {'cache (initial + recent)':<26} {'ppl, pos > W':>12} {'x dense':>8} {'ppl, sampled':>13}"
    lines = [head, "-" * len(head)]
    for method, cache in rows:
        if method not in results:
            continue
        ppl_late = perplexity(at(results[method], late)) if method != "recompute" else float("nan")
        ratio = f"{ppl_late / dense_late:>8.2f}" if method != "recompute" else f"{'':>8}"
        late_text = f"{ppl_late:>12.2f}" if method != "recompute" else f"{'(sampled)':>12}"
        lines.append(
            f"{method:<14} {cache:<26} {late_text} {ratio} {perplexity(at(results[method], sampled)):>13.2f}"
        )
    lines.append(
        f"ppl, pos > W: tokens after the first ones left a window of {window}; ppl, sampled: the "
        f"{len(sampled)} positions recompute scored. Our model ({name}) and our text, not the paper's numbers."
    )
    return "\n".join(lines)


def bucketed(result, bucket: int, n: int) -> list[float]:
    """Perplexity per position bucket [k * bucket, (k + 1) * bucket)."""
    sums = [[] for _ in range(-(-n // bucket))]
    for p, v in zip(*result):
        sums[p // bucket].append(v)
    return [perplexity(s) for s in sums]


def format_plot(results, bucket: int, n: int, height: int = 12) -> str:
    """Perplexity against position, log scale, one column per bucket, one letter per method."""
    # recompute is sampled: a few positions a column would only add noise
    series = {m: bucketed(results[m], bucket, n) for m in METHODS if m in results and m != "recompute"}
    finite = [v for vs in series.values() for v in vs if v == v]
    low, high = math.log(min(finite)), math.log(max(finite))
    span = max(high - low, 1e-9)
    width = len(next(iter(series.values())))
    grid = [[" "] * width for _ in range(height)]
    for method, values in series.items():
        for x, v in enumerate(values):
            if v == v:
                y = round((math.log(v) - low) / span * (height - 1))
                cell = grid[height - 1 - y][x]
                grid[height - 1 - y][x] = MARKS[method] if cell == " " else "*"
    lines = []
    for row, cells in enumerate(grid):
        level = math.exp(high - row / (height - 1) * span)
        lines.append(f"{level:>9.1f} |" + "  ".join(cells))
    lines.append(" " * 10 + "+" + "-" * (3 * width - 2))
    lines.append(" " * 11 + f"position, {bucket} tokens a column (0 .. {n})")
    lines.append(" " * 11 + "  ".join(f"{MARKS[m]} {m}" for m in series) + "  (* several at one point)")
    return "\n".join(lines)


def format_strip(run, n: int, sinks_count: int, width: int = 96) -> str:
    """What each cache holds after the last token, layer 0, KV head 0: s sink, h heavy hitter, r recent."""
    kept = run.kept[min(run.kept)][0]
    cells = []
    for i in range(width):
        lo, hi = i * n // width, max((i + 1) * n // width, i * n // width + 1)
        recent = hi > n - run.recent
        heavy = bool(kept[lo:hi].any()) and not recent
        cells.append("r" if recent else ("h" if heavy else "."))
    sink_strip = [
        "s" if i * n // width < sinks_count else ("r" if c == "r" else ".") for i, c in enumerate(cells)
    ]
    return "\n".join(
        [
            f"what each cache holds after token {n} (layer {min(run.kept)}, KV head 0; {n // width} positions a cell):",
            "  sinks         " + "".join(sink_strip),
            "  heavy hitters " + "".join(cells),
        ]
    )


@click.command("sinks")
@click.argument("text", required=False, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--model", "-m", default="smollm2", show_default=True, help="smollm2, gemma3, or any model kvtui loads."
)
@click.option(
    "--device",
    default="cpu",
    show_default=True,
    callback=check_device,
    metavar="auto|cpu|cuda[:N]",
    help="Where the model runs.",
)
@click.option(
    "--window",
    "-W",
    type=click.IntRange(min=2),
    default=None,
    help="Cache budget W [smollm2: 256, gemma3: 512].",
)
@click.option(
    "--sinks", "-S", type=click.IntRange(min=0), default=4, show_default=True, help="Sink tokens S."
)
@click.option(
    "--tokens", type=click.IntRange(min=16), default=2048, show_default=True, help="Score this many tokens."
)
@click.option(
    "--samples", type=click.IntRange(min=0), default=16, show_default=True, help="Recompute positions."
)
@click.option("--bucket", type=click.IntRange(min=1), default=None, help="Positions per plot column [W / 2].")
@click.option("--no-heavy-hitters", is_flag=True, help="Skip H2O (its eager forward is the slowest part).")
@click.option("--threads", type=click.IntRange(min=1), default=None, help="torch CPU threads.")
@click.option(
    "--trace",
    "trace_path",
    type=click.Path(dir_okay=False),
    callback=output_file,
    help="Also write the caches as they advance, for `kvtui replay` (rings tab: sinks, recent, heavy hitters).",
)
@click.option(
    "--trace-every",
    type=click.IntRange(min=1),
    default=None,
    help="Positions per traced sample [as many as keep 256 samples].",
)
@click.option(
    "--trace-layer",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="The layer whose heavy hitters the trace follows (KV head 0).",
)
def sinks(
    text,
    model,
    device,
    window,
    sinks,
    tokens,
    samples,
    bucket,
    no_heavy_hitters,
    threads,
    trace_path,
    trace_every,
    trace_layer,
):
    """Why attention sinks exist, on our models: perplexity of a long text with a window, with S sinks + a
    window, with heavy hitters, and with full attention, all at one cache budget W.

    TEXT is a plain-text file (default: Python's own language reference, pydoc_data.topics, installed with
    Python). A few minutes on 2 CPU cores at the defaults; --tokens shortens it.

    \b
    Examples:
      kvtui sinks                                SmolLM2, W=256, S=4, 2048 tokens
      kvtui sinks -m gemma3 --tokens 2048        Gemma 3: W=512, its 3 full layers forced to the window
      kvtui sinks book.txt -W 128 -S 4 --tokens 1024
      kvtui sinks --tokens 1024 --trace sinks.jsonl && kvtui replay sinks.jsonl   (then 5: the rings)
    """
    import torch

    from engine.models.loading import describe

    if threads:
        torch.set_num_threads(threads)
    window = window or DEFAULT_WINDOW.get(model, 256)
    if sinks >= window:
        raise click.BadParameter(f"S ({sinks}) must be smaller than W ({window})", param_hint="--sinks")
    hf_model, tokenizer, name, token_ids = model_and_text(model, device, text, tokens)
    n = len(token_ids)
    if n <= window + 1:
        raise click.UsageError(f"the text has {n} tokens: it needs more than W + 1 = {window + 1}")
    source = str(text) if text else "Python's language reference (pydoc_data.topics)"

    def say(message):
        click.echo(message, err=True)

    layers = hf_model.config.num_hidden_layers
    if trace_layer >= layers:
        raise click.BadParameter(
            f"{name} has layers 0-{layers - 1}, not {trace_layer}", param_hint="--trace-layer"
        )
    every = trace_every or default_every(n)
    results = run_experiment(
        hf_model,
        tokenizer,
        name,
        token_ids,
        window,
        sinks,
        samples,
        not no_heavy_hitters,
        say,
        trace_layer if trace_path else None,
        query_positions(n, every) if trace_path else (),
    )
    hybrid = any(w is not None for w in describe(hf_model, name).windows)
    click.echo(f"StreamingLLM's experiment on {name}, {n} tokens of {source}; W = {window}, S = {sinks}")
    click.echo(format_table(results, window, sinks, n, name, hybrid))
    click.echo()
    click.echo(format_plot(results, bucket or max(window // 2, 1), n))
    if "_kept" in results:
        click.echo()
        click.echo(format_strip(results["_kept"], n, sinks))
    if trace_path:
        header, events = sinks_trace(
            results["_header"], token_ids, results["_texts"], window, sinks, results.get("_kept"), every
        )
        write_trace(trace_path, header, events)
        click.echo()
        held = (
            f"; heavy hitters of layer {trace_layer}, KV head 0" if results.get("_kept") is not None else ""
        )
        click.echo(
            f"trace: {trace_path} ({len(sample_ends(n, every))} samples, one every {every} positions{held}): "
            f"kvtui replay {trace_path}, then 5 for the rings"
        )


COMMANDS = [sinks]
