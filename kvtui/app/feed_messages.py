"""What crosses between the live UI and its engine thread, one typed, frozen message per kind.

Engine thread -> UI, through the `EventFeed` (a `FeedItem`):
  FeedHeader   the trace header, once the model is loaded (a new timeline starts)
  FeedEvent    one trace event
  FeedNotice   something to tell the user (a notification of that severity)
  EngineDied   the worker stopped for good, and why (the prompt box says so)
UI -> engine thread, through the `EngineWorker`'s command queue (a `Command`):
  SubmitPrompt, AbortRequest, EditTokens, ForkRequest, StopEngine, HoldEngine (stop stepping between steps, or
  go on), StepOnce (one step while held)

msgspec structs, not dataclasses: a frozen struct is built as fast as a tuple (~70 ns against ~250 ns for a
frozen dataclass), and the engine hands over one `FeedEvent` per trace event. None takes part in a cycle, so
none is tracked by the garbage collector.
"""

from __future__ import annotations

import msgspec


class FeedHeader(msgspec.Struct, frozen=True, gc=False):
    header: dict


class FeedEvent(msgspec.Struct, frozen=True, gc=False):
    event: dict


class FeedNotice(msgspec.Struct, frozen=True, gc=False):
    text: str
    # a Textual notification severity: "information", "warning" or "error"
    severity: str = "information"


class EngineDied(msgspec.Struct, frozen=True, gc=False):
    reason: str


FeedItem = FeedHeader | FeedEvent | FeedNotice | EngineDied


class SubmitPrompt(msgspec.Struct, frozen=True, gc=False):
    # text, or chat messages ([{"role": ..., "content": ...}])
    prompt: str | list
    max_tokens: int = 64
    temperature: float = 0.0
    seed: int | None = None


class AbortRequest(msgspec.Struct, frozen=True, gc=False):
    request_id: str


class EditTokens(msgspec.Struct, frozen=True, gc=False):
    """Replace tokens [position, position + num_tokens) by `text`, insert it before position, or delete
    (`kind`); `expected_token` is what the view showed at position (a stale view is refused)."""

    request_id: str
    position: int
    text: str
    kind: str
    num_tokens: int = 1
    expected_token: int | None = None


class ForkRequest(msgspec.Struct, frozen=True, gc=False):
    request_id: str
    n: int = 1


class StopEngine(msgspec.Struct, frozen=True, gc=False):
    pass


class HoldEngine(msgspec.Struct, frozen=True, gc=False):
    held: bool


class StepOnce(msgspec.Struct, frozen=True, gc=False):
    pass


Command = SubmitPrompt | AbortRequest | EditTokens | ForkRequest | StopEngine | HoldEngine | StepOnce
