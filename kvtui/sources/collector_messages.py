"""What crosses the pipe between `kvtui attach`'s UI and its collector process (collector.py), one typed,
frozen message per kind, pickled by the pipe.

UI -> collector:
  AskView(with_tree)               the next `FleetView` (with the prefix-tree rows when that tab shows)
  AskExplain(token_ids, options)   explain a prompt against every worker's cache
  StopCollecting()                 close the trace and exit
collector -> UI:
  ViewReady(view, counters)        the view asked for, and the attacher's counters
  Explained(text)                  the explanation asked for
  CollectorNotice(text, severity)  something to tell the user
  CollectorStopped(counters)       the trace is closed; the collector exits
  CollectorFailed(why)             the collector could not go on (the trace is closed too)

msgspec structs: built as fast as tuples, and pickled as small. A `FleetView` holds no cycle, so none of them
is tracked by the garbage collector.
"""

from __future__ import annotations

import msgspec

from kvtui.state.fleet_view import FleetView


class AskView(msgspec.Struct, frozen=True, gc=False):
    with_tree: bool


class AskExplain(msgspec.Struct, frozen=True, gc=False):
    token_ids: list[int]
    # salt, lora, group (kvtui/state/fleet_explain.py's parse_query)
    options: dict


class StopCollecting(msgspec.Struct, frozen=True, gc=False):
    pass


ToCollector = AskView | AskExplain | StopCollecting


class ViewReady(msgspec.Struct, frozen=True, gc=False):
    view: FleetView
    # the attacher's: messages, events, blocks, malformed, gaps, lost, restarts
    counters: dict


class Explained(msgspec.Struct, frozen=True, gc=False):
    text: str


class CollectorNotice(msgspec.Struct, frozen=True, gc=False):
    text: str
    # a Textual notification severity: "information", "warning" or "error"
    severity: str = "information"


class CollectorStopped(msgspec.Struct, frozen=True, gc=False):
    counters: dict


class CollectorFailed(msgspec.Struct, frozen=True, gc=False):
    why: str


FromCollector = ViewReady | Explained | CollectorNotice | CollectorStopped | CollectorFailed
