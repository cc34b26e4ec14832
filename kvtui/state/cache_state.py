"""`CacheState`: everything known about the cache after some events, and the one place events are applied.

`CacheState` composes the reducers (pool, KV-cache groups, requests, tree, rings, metrics, lower tiers: one mixin each, all on one object so
the views read plain attributes) and dispatches each event to the one `_on_<type>` handler that folds it in.
`snapshot` copies a state cheaply: flat lists are copied, and requests, radix nodes and rings are copied on
write (see `_GENERATIONS`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from kvtui.state.groups import GroupsReducer
from kvtui.state.metrics import History, MetricsReducer
from kvtui.state.pool import PoolReducer
from kvtui.state.requests import RequestsReducer
from kvtui.state.rings import RingsReducer
from kvtui.state.tiers import TiersReducer
from kvtui.state.tree import TreeReducer

# Copy-on-write ownership: a state may mutate a RequestRecord / RadixNode / Ring in place only if the object's
# `owner` equals the state's `_gen`; a snapshot gives both sides fresh generations, so shared objects get copied on
# their first mutation. (A token per snapshot, not a set of shared ids: O(1) per snapshot.)
_GENERATIONS = itertools.count(1)


class CacheState(
    PoolReducer, GroupsReducer, RequestsReducer, TreeReducer, RingsReducer, MetricsReducer, TiersReducer
):
    """Everything known about the cache after `index` events. Mutated only by `apply`."""

    def __init__(self, header: dict, history: History | None = None):
        self.header = header
        self.block_size: int = int(header.get("block_size") or 16)
        n = self.num_blocks = int(header.get("num_blocks") or 0)
        self.bytes_per_block: int = int(header.get("bytes_per_block") or 0)
        self.bytes_per_token: int = int(header.get("bytes_per_token") or 0)
        # int8 | fp8_e4m3: K/V stored quantized (a scale per token and KV head); None: the model's dtype
        self.kv_dtype: str | None = header.get("kv_dtype")
        # events applied
        self.index = 0
        self.seq = -1
        self.t = 0.0
        self.step = -1
        # events applied, by type
        self.counts: dict[str, int] = {}
        self.last_event: dict | None = None
        # copy-on-write ownership (see _GENERATIONS)
        self._gen = next(_GENERATIONS)
        self._init_pool(n)
        self._init_groups(header)
        self._init_requests()
        self._init_tree()
        self._init_rings()
        self._init_metrics(history)
        self._init_tiers(header)

    def snapshot(self) -> CacheState:
        """A copy that later `apply` calls on either side never disturb (cheap: objects are copied on write)."""
        new = CacheState.__new__(CacheState)
        new.__dict__.update(self.__dict__)
        self._snapshot_pool(new)
        self._snapshot_groups(new)
        self._snapshot_requests(new)
        self._snapshot_tree(new)
        self._snapshot_rings(new)
        self._snapshot_tiers(new)
        new.counts = dict(self.counts)
        self._gen, new._gen = next(_GENERATIONS), next(_GENERATIONS)
        return new

    def apply(self, event: dict) -> None:
        etype = event["type"]
        handler = _HANDLERS.get(etype)
        if handler is not None:
            handler(self, event)
        self.counts[etype] = self.counts.get(etype, 0) + 1
        self.index += 1
        self.seq = event["seq"]
        self.t = event["t"]
        self.last_event = event

    @property
    def step_in_progress(self) -> int | None:
        """The engine step whose chunks are applied but whose `step` event (written when it ends) is not yet:
        the step the attention masks show. None between steps."""
        return self._writing_step if self._writing_step > self.step else None

    def apply_all(self, events) -> None:
        apply = self.apply
        for event in events:
            apply(event)


def _collect_handlers() -> dict[str, Callable[[CacheState, dict], None]]:
    """Event type -> the reducer method that folds it in (`_on_<type>`; each type has exactly one)."""
    handlers: dict[str, Callable[[CacheState, dict], None]] = {}
    for cls in CacheState.__mro__:
        for name, fn in vars(cls).items():
            if name.startswith("_on_"):
                assert name[len("_on_") :] not in handlers, f"two reducers handle {name[len('_on_') :]!r}"
                handlers[name[len("_on_") :]] = fn
    return handlers


_HANDLERS = _collect_handlers()
