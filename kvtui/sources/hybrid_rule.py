"""The proxy's prediction for a hybrid model served by vLLM: the attached view explained by vLLM's hybrid rule
(kvtui/state/fleet_hybrid.py), with the prompts the proxy forwarded and vLLM has not published yet
(in_flight.py) held as vLLM keeps them in each group.

The groups come from the model's config (`kvtui proxy --kv-config`, in vLLM's order) or, without one, from the
events (vLLM 0.32 names each stored block's group, its kind and its window); while they are not hybrid the
explanation is fleet_explain.py's, as without this module. In a window or Mamba-style group a forwarded prompt
holds the run before its last token and the run before its junction (where the full group found more than the
hit), which this module remembers from its own prediction of it.
"""

from __future__ import annotations

import threading

from engine.models.kv_groups import KVGroup
from kvtui.state.fleet_explain import explain_prompt
from kvtui.state.fleet_hybrid import explain_hybrid, groups_of


class HybridFleet:
    """A FleetState folded by the attach thread and read by the proxy's loop, under one lock, explained by the
    hybrid rule. `in_flight` (the proxy's InFlight) is set by whoever builds the proxy."""

    def __init__(self, fleet, groups: list[KVGroup] | None = None, prefix_match_unit: int | None = None):
        self.fleet = fleet
        self.groups = list(groups or [])
        self.unit = prefix_match_unit
        self.lock = threading.Lock()
        self.in_flight = None
        # (salt, prompt ids) -> the junction predicted for it
        self.junctions: dict[tuple, int] = {}

    def fold(self, events) -> None:
        with self.lock:
            self.fleet.apply_all(events)

    def explain(self, ids, options) -> list[dict]:
        with self.lock:
            groups = self.groups or groups_of(self.fleet)
            if not groups:
                return explain_prompt(self.fleet, list(ids), **options)
            ids = list(ids)
            salt = options.get("salt")
            prompts = getattr(self.in_flight, "prompts", None) or {}
            flying = [
                (other, self.junctions.get((s, tuple(other)), 0))
                for other, s in prompts.values()
                if s == salt
            ]
            # a junction matters while its prompt is in flight (then vLLM's events say what it kept)
            live = {(s, tuple(other)) for other, s in prompts.values()}
            self.junctions = {k: v for k, v in self.junctions.items() if k in live}
            out = []
            for worker in self.fleet.workers.values():
                result, found = explain_hybrid(self.fleet, worker, ids, groups, self.unit, flying, **options)
                if found is not None and found.longest > found.tokens:
                    self.junctions[(salt, tuple(ids))] = found.longest
                out.append(result)
            return out
