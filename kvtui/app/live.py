"""Live mode: draining the engine worker's `EventFeed` into the timeline, following its end, the prompts of the
`PromptBar`, and the live edits (replace, insert, delete a token; fork a request) sent to the engine's
`Controller`."""

from __future__ import annotations

from textual.binding import Binding
from textual.content import Content

from kvtui.app.feed_messages import EngineDied, FeedEvent, FeedHeader, FeedNotice
from kvtui.state.timeline import Timeline
from kvtui.widgets.base import TextLine, join_texts
from kvtui.widgets.prompt_bar import PromptBar
from kvtui.widgets.token_strip import TokenStrip

# most items drained per frame: a backlog is caught up over several frames
FEED_BATCH = 50_000
# seconds an engine error stays on screen (an edit that failed, say): long enough to read, or click it away
ERROR_NOTICE_S = 30

LIVE_BINDINGS = [
    Binding("r", "begin_edit('replace')", "replace token", show=False, id="edit.replace"),
    Binding("i", "begin_edit('insert')", "insert token", show=False, id="edit.insert"),
    Binding("d", "delete_token", "delete token", show=False, id="edit.delete"),
    Binding("f", "fork", "fork request", show=False, id="edit.fork"),
    Binding("p", "focus_prompt", "prompt", show=False, id="live.prompt"),
    Binding("ctrl+t", "toggle_chat", "chat/plain prompt", show=False, id="live.chat"),
    Binding("F", "follow", "follow live", show=False, id="live.follow"),
    Binding("s", "abort_request", "stop (abort) request", show=False, id="live.abort"),
    # a request runs in about 2 s: held, the engine waits between steps while a person looks
    Binding("h", "hold_engine", "hold/resume engine", id="live.hold"),
    Binding("n", "engine_step_once", "one engine step (held)", show=False, id="live.step_once"),
]
# shown and working in live mode only
LIVE_ONLY_ACTIONS = {"hold_engine", "engine_step_once"}


class LiveMixin:
    """The part of `KvtuiApp` that talks to a running engine (through `feed` and `controller`)."""

    # why the engine worker stopped, once it has
    engine_dead: str | None = None
    # (request, start, count, token id, kind) of the open edit
    _pending_edit: tuple[str, int, int, int, str] | None = None
    # the leading whitespace of the open edit's first token
    _edit_lead: str = ""
    # the engine waits between steps (h); n runs one
    held: bool = False

    # ------------------------------------------------------------------ the feed
    def pump(self) -> bool:
        """Drain the feed into the timeline (live mode). Returns whether anything changed."""
        items = self.feed.drain(FEED_BATCH)
        if not items:
            return False
        batch: list[dict] = []
        for item in items:
            if isinstance(item, FeedEvent):
                batch.append(item.event)
                continue
            # the events before a header, notice or death land first
            self._ingest(batch)
            batch = []
            match item:
                case FeedHeader(header):
                    self.timeline = Timeline(header)
                    self.state, self.cursor = self.timeline.tip, 0
                case FeedNotice(text, severity):
                    self.notify(text, severity=severity, timeout=ERROR_NOTICE_S if severity == "error" else 4)
                case EngineDied(reason):
                    self._engine_died(reason)
        self._ingest(batch)
        return True

    def _ingest(self, batch: list[dict]) -> None:
        if not batch or self.timeline is None:
            return
        self.timeline.extend(batch)
        if self._select_next_arrival:
            arrivals = [ev["request_id"] for ev in batch if ev["type"] == "request_arrived"]
            if arrivals:
                self.view.request_id = arrivals[-1]
                self._select_next_arrival = False
        if self.following:
            self.state, self.cursor = self.timeline.tip, len(self.timeline)

    def action_follow(self) -> None:
        if self.live and self.timeline is not None:
            self.following = True
            self.playing = False
            self.seek(len(self.timeline))

    # ------------------------------------------------------------------ holding the engine
    def action_hold_engine(self) -> None:
        if not self.live or self.engine_dead:
            return
        self.held = not self.held
        self.controller.hold(self.held)
        self.notify(
            "engine held between steps: n runs one step, h resumes"
            if self.held
            else "engine running (h holds it)",
            timeout=3,
        )
        self.refresh_views()

    def action_engine_step_once(self) -> None:
        if not self.live or self.engine_dead:
            return
        if not self.held:
            self.notify("n runs one step while the engine is held: h holds it", timeout=3)
            return
        # follow, so that the step shows
        self.action_follow()
        self.controller.step_once()

    # ------------------------------------------------------------------ the prompt
    def action_focus_prompt(self) -> None:
        if self.live:
            self.query_one(PromptBar).focus_prompt()

    def action_toggle_chat(self) -> None:
        self.chat = not self.chat
        if self.live:
            self.query_one(PromptBar).chat = self.chat
        self.notify(
            "chat mode: prompts go through the chat template" if self.chat else "plain prompt mode", timeout=2
        )
        self.refresh_views()

    def _engine_died(self, reason: str) -> None:
        """The engine worker stopped for good: say so in a notice, the status line and the prompt box."""
        self.engine_dead = reason
        self.notify(
            f"{reason}. Nothing more will run; the trace so far stays browsable.",
            severity="error",
            timeout=15,
        )
        if self.live:
            self.query_one(PromptBar).stop(reason)
            self.query_one("#status", TextLine).set(self.status_text(self.size.width))

    def on_prompt_bar_submitted(self, message: PromptBar.Submitted) -> None:
        """A prompt from the prompt bar: send it to the engine and select the request it starts."""
        if self.engine_dead:
            self.notify(f"the engine stopped ({self.engine_dead}): prompts go nowhere", severity="error")
            return
        text = message.prompt
        prompt = [{"role": "user", "content": text}] if self.chat else text
        self.controller.submit(prompt, message.max_tokens, temperature=message.temperature, seed=message.seed)
        self._select_next_arrival = True
        message.bar.clear()
        # the keys go back to the views: the next `p` opens the box again, it does not type a "p"
        self.focus_tab()

    # ------------------------------------------------------------------ edits and fork
    def _require_live(self, what: str) -> bool:
        if not self.live:
            self.notify(
                f"{what} needs live mode (kvtui live); this is a replay", severity="warning", timeout=3
            )
            return False
        if self.engine_dead:
            self.notify(f"{what}: the engine stopped ({self.engine_dead})", severity="error", timeout=5)
            return False
        if self.view.request is None:
            self.notify(f"{what}: no request selected", severity="warning", timeout=3)
            return False
        return True

    def _edit_target(self, what: str) -> tuple[str, int, int, int | None] | None:
        """(request, start, count, token id at start) of the selection, as the live engine has it now; at a
        finished request's end slot (count 0, no token id) only an insert.

        An edit goes to the engine's present, so a view scrubbed back first jumps to live; if the selected
        tokens are not the same there (generation moved on, an edit landed), nothing is sent and a notice says
        why. The engine checks the token id again when the edit arrives."""
        strip = self.query_one("#token-strip", TokenStrip)
        rid = self.view.request_id
        start, end = strip.selection()
        seen = list(self.view.request.token_ids[start:end])
        if start == end and what != "insert":
            self.notify(
                f"{what}: the cursor is after the last token, where only i (insert) works: ← to pick a token",
                severity="warning",
                timeout=4,
            )
            return None
        if self.timeline is not None and (not self.following or self.cursor != len(self.timeline)):
            self.action_follow()
            live = self.state.requests.get(rid) if self.state is not None else None
            # after the last token: the request must not have grown since
            moved = live is not None and start == end and live.num_tokens != start
            if live is None or live.token_ids[start:end] != seen or moved:
                now = (
                    "nothing (the request is gone)" if live is None else repr("".join(live.texts[start:end]))
                )
                self.notify(
                    f"{what}: jumped to live, where positions {start}-{end - 1} of {rid} now hold {now}, "
                    f"not what was selected: look and select again",
                    severity="warning",
                    timeout=8,
                )
                return None
            self.notify(f"{what}: jumped to live first (edits apply to the engine's present)", timeout=3)
        if start == end:
            # an insert after the last token: no token there for the engine to check
            return rid, start, 0, None
        if not seen:
            return None
        return rid, start, end - start, seen[0]

    def action_begin_edit(self, kind: str) -> None:
        if not self._require_live(f"{kind} a token"):
            return
        self.action_show_tab("tokens")
        target = self._edit_target(kind)
        if target is None:
            return
        rid, start, count, _ = target
        texts = self.view.request.texts
        if kind == "replace":
            where = f"position {start}" if count == 1 else f"positions {start}-{start + count - 1}"
            what = (
                f"replace {''.join(texts[start : start + count])!r} ({where}, {count} token"
                f"{'s' if count > 1 else ''}) with this text, any length"
            )
        elif start == len(texts):
            what = f"insert after the last token (position {start - 1}, {texts[-1]!r}) this text, a new turn"
        else:
            what = f"insert before position {start} ({texts[start]!r}) this text"
        self._pending_edit = (*target, kind)
        first = texts[start] if start < len(texts) else ""
        self._edit_lead = first[: len(first) - len(first.lstrip())]
        self._open_input(kind, f"{what}; Enter applies, Esc cancels")

    def _with_lead(self, typed: str) -> str:
        """The typed text with the selected token's own leading space when the text has none of its own: typing
        "ocean" over " sky" gives " ocean", not "theocean", and typing " very" gives " very", not "  very"
        (a space put in the box for the user would be invisible there)."""
        if not typed or typed[:1].isspace():
            return typed
        return self._edit_lead + typed

    def _preview_edit(self, typed: str) -> None:
        """The line above the edit box: what the text around the edit becomes if Enter sends `typed` now."""
        pending, req = self._pending_edit, self.view.request
        if pending is None or req is None:
            return
        _rid, start, count, _token, kind = pending
        texts = req.texts
        after = start + count if kind == "replace" else start
        before = join_texts(texts[max(0, start - 12) : start])
        rest = join_texts(texts[after : after + 12])
        sent = self._with_lead(typed)
        shown = f"{'…' if start > 12 else ''}{before}{sent}{rest}{'…' if after + 12 < len(texts) else ''}"
        self.query_one("#edit-preview", TextLine).set(
            Content.assemble(
                (f"{kind} → ", "bold"),
                shown.replace("\n", "⏎"),
                ("   (Enter sends, Esc cancels; the token's leading space is kept)", "dim")
                if sent != typed
                else ("   (Enter sends, Esc cancels)", "dim"),
            )
        )

    def _edit_text(self, mode: str, text: str) -> None:
        """The small input was submitted in replace or insert mode: send the edit chosen when it opened."""
        text = self._with_lead(text)
        target, self._pending_edit = self._pending_edit, None
        if target is None:
            return
        if not text.strip():
            self.notify(f"nothing to {mode}: type the new text", severity="warning", timeout=3)
            return
        rid, start, count, token_id, _kind = target
        self.controller.edit(
            rid, start, text, mode, num_tokens=count if mode == "replace" else 1, expected_token=token_id
        )

    def action_delete_token(self) -> None:
        if not self._require_live("delete a token"):
            return
        target = self._edit_target("delete")
        if target is None:
            return
        rid, start, count, token_id = target
        self.controller.edit(rid, start, "", "delete", num_tokens=count, expected_token=token_id)
        self.notify(f"delete {count} token{'s' if count > 1 else ''} at position {start} of {rid}", timeout=2)

    def action_abort_request(self) -> None:
        if not self._require_live("stop a request"):
            return
        req = self.view.request
        if req.status == "finished":
            self.notify(f"{req.request_id} has already finished", severity="warning", timeout=3)
            return
        self.controller.abort(req.request_id)
        self.notify(f"stop {req.request_id}: it finishes with reason 'aborted'", timeout=2)

    def action_fork(self) -> None:
        if not self._require_live("fork"):
            return
        self.controller.fork(self.view.request_id, 1)
        self._select_next_arrival = True
