"""`kvtui bench tiers`: is loading a block from the host tier cheaper than computing its tokens again, on this
machine and model?

One engine with a host tier; each round takes a prompt of `blocks` whole blocks plus one token, under a salt of its
own (so nothing of an earlier round is found), through four phases, each timed to its first token:
    cold     nothing cached: every token computed
    device   asked again at once: the blocks are on the device, only the last token is computed
    offload  every cached block evicted, so copied to host (the copies are applied and timed on their own)
    host     asked again: the blocks are loaded back from host, the last token computed
Per block: recompute = (cold - device) / blocks; load and offload: the copies alone, timed between the phases
(the same copies the engine applies before a forward), over blocks.
Medians over rounds; the phases alternate within each round, so load on the machine falls on all of them.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from engine.worker.tier_tensors import apply_copies


@dataclass
class TierCosts:
    model: str
    device: str
    block_size: int
    blocks: int
    bytes_per_block: int
    rounds: list[dict[str, float]] = field(default_factory=list)

    def median(self, phase: str) -> float:
        return statistics.median(r[phase] for r in self.rounds)

    def per_block(self) -> dict[str, float]:
        """Seconds per block: recompute, load, offload (medians of each round's figure)."""
        n = self.blocks

        def med(f):
            return statistics.median(f(r) for r in self.rounds)

        return {
            "recompute": med(lambda r: (r["cold"] - r["device"]) / n),
            "load": med(lambda r: r["load"] / n),
            "offload": med(lambda r: r["offload"] / n),
        }

    def to_json(self) -> dict:
        return {**asdict(self), "per_block_seconds": self.per_block()}


def _first_token(engine, prompt: list[int], salt: str) -> tuple[float, int]:
    from engine.engine import SamplingParams

    start = time.perf_counter()
    rid = engine.submit(prompt, SamplingParams(max_tokens=1), cache_salt=salt)
    while engine.has_unfinished():
        engine.step()
    seconds = time.perf_counter() - start
    return seconds, engine.output(rid).cached_tokens


def _time_loads(engine) -> float:
    """Seconds to copy every block host holds into free device blocks, as a load does (the free blocks' contents
    are nobody's; the request that follows loads the blocks again through the engine)."""
    from engine.core.blocks import BlockCopy

    slots = sorted(engine.cache.tiers.slots()["host"])
    free = list(engine.cache.pool.free)[: len(slots)]
    size = engine.config.block_size
    moves = [BlockCopy(s, d, size, "host", "device") for s, d in zip(slots, free)]
    start = time.perf_counter()
    apply_copies(moves, engine.kv, engine.host_kv)
    return time.perf_counter() - start


def run_tiers(engine, prompt: list[int], rounds: int, progress=None) -> TierCosts:
    """`prompt`: whole blocks plus one token; the engine's pool and host tier hold them all."""
    bs = engine.config.block_size
    blocks = (len(prompt) - 1) // bs
    costs = TierCosts(
        engine.shape.name,
        str(engine.kv.kv.device),
        bs,
        blocks,
        engine.shape.kv_bytes_per_block(bs),
    )
    for r in range(rounds):
        salt = f"bench-tiers-{r}"
        cold, hit = _first_token(engine, prompt, salt)
        device, hit_device = _first_token(engine, prompt, salt)
        engine.cache.evict(engine.cache.num_cached())
        start = time.perf_counter()
        apply_copies(engine.cache.pool.take_copies(), engine.kv, engine.host_kv)
        offload = time.perf_counter() - start
        load = _time_loads(engine)
        host, hit_host = _first_token(engine, prompt, salt)
        if hit or hit_device != blocks * bs or hit_host != blocks * bs:
            raise RuntimeError(
                f"round {r}: cached tokens {hit}, {hit_device}, {hit_host}: the pool or the host tier is too "
                "small for the prompt"
            )
        costs.rounds.append({"cold": cold, "device": device, "host": host, "offload": offload, "load": load})
        if progress:
            progress(f"round {r + 1}/{rounds}: cold {cold * 1e3:.1f} ms, host hit {host * 1e3:.1f} ms")
    return costs


def format_tiers(costs: TierCosts) -> str:
    per = costs.per_block()
    kib = costs.bytes_per_block / 1024
    ratio = per["recompute"] / per["load"] if per["load"] > 0 else float("inf")
    lines = [
        f"{costs.model} on {costs.device}: {costs.blocks} blocks of {costs.block_size} tokens "
        f"({kib:.0f} KiB of K/V each), {len(costs.rounds)} rounds, medians",
        f"  first token, nothing cached      {costs.median('cold') * 1e3:9.2f} ms",
        f"  first token, blocks on device    {costs.median('device') * 1e3:9.2f} ms",
        f"  first token, blocks from host    {costs.median('host') * 1e3:9.2f} ms",
        "per block:",
        f"  compute its tokens again         {per['recompute'] * 1e3:9.3f} ms",
        f"  load it from host                {per['load'] * 1e3:9.3f} ms"
        f"   ({costs.bytes_per_block / 2**30 / per['load'] if per['load'] > 0 else float('inf'):.2f} GiB/s)",
        f"  offload it to host               {per['offload'] * 1e3:9.3f} ms",
        f"loading is {ratio:.1f}x cheaper than computing again: a host tier pays for every block it serves"
        if ratio > 1
        else f"loading costs {1 / ratio:.1f}x computing again: on this machine a host tier does not pay",
    ]
    return "\n".join(lines)


def save(costs: TierCosts, path: Path) -> None:
    """The figure the views show beside the host tier (kvtui/state reads it back)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {**costs.to_json(), "measured": time.strftime("%Y-%m-%d %H:%M")}
    path.write_text(json.dumps(data, indent=1))
