"""The pure reducer: trace events -> `CacheState`, shared by live and replay.

`CacheState.apply(event)` folds one event in. Everything the views draw is there: the block pool (ref counts,
owners, hashes, cached/free), every block table, the requests with their tokens and timings, the radix tree,
the sliding-window rings, the miss explainer, the last edit and the metrics history.

One module per concern, each a mixin of `CacheState` holding that concern's fields and `_on_<event>` handlers:
  pool.py         blocks: ref counts, owners, hashes, free/held/cached, block tables, blocks being written
  requests.py     requests: lifecycle, tokens, timings, prefix matches, edits
  tree.py         the radix tree: nodes, hits, lock refs, recent evictions
  rings.py        sliding-window rings, window-layer restarts and attention-sink divergence
  metrics.py      step / hit-rate / inter-token-latency series (`History`) and counters
  tiers.py        the lower tiers (host, disk): their slots, blocks moved between tiers, hits by tier
  cache_state.py  `CacheState`: composes them, dispatches events, snapshots
  replaying.py    `replay` (a straight replay) and `state_fingerprint`

Speed matters (a replay ingests hundreds of thousands of events per second, and seeking copies states), so:
- pool facts live in flat lists indexed by physical block, not in one object per block;
- metrics history is append-only and shared by every state of one trace (`History`); a state only records how
  much of it it has seen, so copying a state never copies the history;
- requests and radix nodes are copied on write: a snapshot shares them and the first mutation copies just
  that one object.
`Timeline` (kvtui/state/timeline.py) keeps keyframes (snapshots every N events) so `state_at(k)` is fast.
"""

from kvtui.state.cache_state import CacheState
from kvtui.state.metrics import History
from kvtui.state.pool import CACHED, FREE, SHARED, USED, WRITING
from kvtui.state.replaying import replay, state_fingerprint
from kvtui.state.requests import FINISHED, PREEMPTED, RUNNING, WAITING, RequestRecord
from kvtui.state.rings import Ring
from kvtui.state.tree import RadixNode

__all__ = [
    "CACHED",
    "FINISHED",
    "FREE",
    "PREEMPTED",
    "RUNNING",
    "SHARED",
    "USED",
    "WAITING",
    "WRITING",
    "CacheState",
    "History",
    "RadixNode",
    "RequestRecord",
    "Ring",
    "replay",
    "state_fingerprint",
]
