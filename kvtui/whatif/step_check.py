"""The step-by-step check of the twin against vLLM's published state: after each of the server's steps, the
blocks the twin holds in its prefix cache against the blocks vLLM's KV events leave resident, both as the twin's
block keys (kvtui/sources/server_view.py). Only blocks of the log's requests are compared: the server may hold others (requests
before the log, or from clients that bypass the proxy), which the twin never saw.

    {"steps": checked, "divergent_steps": how many differed, "budget": the step's token budget read from
     the log's cut chunks (step_clock.py), or null,
     "first": null, or {"step", "t", "only_server": [{"block", "requests"}], "only_twin": [...],
                        "admitted": request ids the step admitted}}

`block` is the block's index in its requests' token sequence (logical, from 0); `requests` the log's requests
whose prompt or output holds it. The first divergence is where the twin's picture of the cache stopped being
vLLM's: every later difference may follow from it.
"""

from __future__ import annotations

from collections import Counter

from kvtui.sources.server_view import Step

# blocks named per side in a divergence
SHOWN = 8


class StepCheck:
    def __init__(self, plan):
        self.plan = plan
        self.twin: set[str] = set()
        self.server: Counter = Counter()
        self.steps = 0
        self.divergent = 0
        self.first: dict | None = None

    def on_twin_event(self, event: dict) -> None:
        kind = event["type"]
        if kind == "radix_insert":
            self.twin.update(event["hashes"])
        elif kind == "block_evicted":
            self.twin.discard(event["hash"])

    def after_step(self, step: Step) -> None:
        server = self.server
        if step.cleared:
            server.clear()
        server.update(step.stored)
        server.subtract(step.removed)
        owners = self.plan.owners
        held = {key for key, n in server.items() if n > 0 and key in owners}
        self.steps += 1
        if held == self.twin:
            return
        self.divergent += 1
        if self.first is None:
            self.first = {
                "step": step.index,
                "t": round(step.t, 6),
                "only_server": self._named(held - self.twin),
                "only_twin": self._named(self.twin - held),
                "admitted": sorted(r for r, s in self.plan.admit_step.items() if s == step.index),
            }

    def _named(self, keys: set) -> list[dict]:
        out = []
        owners, position = self.plan.owners, self.plan.position
        for key in sorted(keys, key=lambda k: (owners.get(k, ["?"])[0], position.get(k, -1)))[:SHOWN]:
            out.append({"block": position.get(key, -1), "requests": owners.get(key, ["?"])[:4]})
        if len(keys) > SHOWN:
            out.append({"more": len(keys) - SHOWN})
        return out

    def report(self) -> dict:
        return {"steps": self.steps, "divergent_steps": self.divergent, "first": self.first}


def check_lines(check: dict) -> list[str]:
    """The check as the report's text says it."""
    if not check:
        return []
    line = (
        f"          step check: {check['steps']} server steps, the twin's cached blocks equal vLLM's after "
        f"{check['steps'] - check['divergent_steps']}"
    )
    first = check["first"]
    if first is None:
        return [line + " (all)"]
    lines = [line + f"; first divergence at step {first['step']} ({first['t']:.3f} s)"]
    for side, words in (
        ("only_server", "held by vLLM, not the twin"),
        ("only_twin", "held by the twin only"),
    ):
        named = [
            f"block {b['block']} of {', '.join(b['requests'])}" if "block" in b else f"{b['more']} more"
            for b in first[side]
        ]
        if named:
            lines.append(f"            {words}: " + "; ".join(named))
    if first["admitted"]:
        lines.append("            admitted in that step: " + ", ".join(first["admitted"]))
    return lines
