"""Replay controls: play/pause, speed, stepping by event or engine step, seeking (fraction, marker, "go to",
the scrubber), and `seek` itself, which moves the cursor and rebuilds the state."""

from __future__ import annotations

from textual.binding import Binding

from kvtui.widgets.scrubber import Scrubber

SPEEDS = (0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 64.0, 256.0)
# playing shortens a stretch of trace time with no event (a long prefill's forward, a pause between users) to
# this many trace seconds, then plays it at the speed chosen: 1 s on screen at 1x, 10 s at 0.1x, so the speed
# keys change what a person sees; the status line says how much was skipped
IDLE_KEEP_S = 1.0

PLAYBACK_BINDINGS = [
    Binding("space", "toggle_play", "play/pause", id="replay.play"),
    Binding("full_stop", "step_event(1)", "event +1", show=False, id="replay.event_next"),
    Binding("comma", "step_event(-1)", "event -1", show=False, id="replay.event_prev"),
    Binding("greater_than_sign", "step_engine(1)", "step +1", show=False, id="replay.step_next"),
    Binding("less_than_sign", "step_engine(-1)", "step -1", show=False, id="replay.step_prev"),
    Binding("plus,equals_sign", "speed(1)", "faster", show=False, id="replay.faster"),
    Binding("minus", "speed(-1)", "slower", show=False, id="replay.slower"),
    Binding("g", "goto", "go to %", show=False, id="replay.goto"),
    Binding("ctrl+home", "seek_fraction(0)", "start of trace", show=False, id="replay.start"),
    Binding("ctrl+end,G", "seek_fraction(1)", "end of trace", show=False, id="replay.end"),
    Binding("a", "seek_marker('arrival', 1)", "next arrival", show=False, id="seek.arrival_next"),
    Binding("A", "seek_marker('arrival', -1)", "previous arrival", show=False, id="seek.arrival_prev"),
    Binding("e", "seek_marker('edit', 1)", "next edit", show=False, id="seek.edit_next"),
    Binding("E", "seek_marker('edit', -1)", "previous edit", show=False, id="seek.edit_prev"),
    Binding("x", "seek_marker('eviction', 1)", "next eviction", show=False, id="seek.eviction_next"),
    Binding("X", "seek_marker('eviction', -1)", "previous eviction", show=False, id="seek.eviction_prev"),
    Binding("m", "seek_marker('miss', 1)", "next miss", show=False, id="seek.miss_next"),
    Binding("M", "seek_marker('miss', -1)", "previous miss", show=False, id="seek.miss_prev"),
]


class PlaybackMixin:
    """The part of `KvtuiApp` that moves the cursor through the timeline."""

    # trace seconds with no event that playing skipped since it started
    skipped_idle: float = 0.0

    def _skip_idle(self) -> None:
        """Playing: when the next event is more than IDLE_KEEP_S of trace time ahead, skip to IDLE_KEEP_S before
        it."""
        tl = self.timeline
        if self.cursor >= len(tl):
            return
        gap = tl.events[self.cursor]["t"] - self.play_t
        if gap > IDLE_KEEP_S:
            self.skipped_idle += gap - IDLE_KEEP_S
            self.play_t += gap - IDLE_KEEP_S

    def seek(self, k: int, refresh: bool = True) -> None:
        tl = self.timeline
        if tl is None:
            return
        k = max(0, min(len(tl), k))
        if self.live and k == len(tl) and self.following:
            self.state = tl.tip
        elif (
            self.state is not None and self.state is not tl.tip and 0 <= k - self.cursor <= tl.keyframe_every
        ):
            # forward: apply just the new events
            self.state.apply_all(tl.events[self.cursor : k])
        else:
            self.state = tl.state_at(k)
        self.cursor = k
        if refresh:
            self.refresh_views()

    def action_toggle_play(self) -> None:
        if self.timeline is None:
            return
        if self.cursor >= len(self.timeline) and not self.playing:
            self.seek(0)
        self.playing = not self.playing
        self.skipped_idle = 0.0
        self.following = False
        self.play_t = self.state.t if self.state is not None and self.cursor else 0.0
        self.last_tick = self.clock()
        self.refresh_views()

    def action_step_event(self, delta: int) -> None:
        self.playing = self.following = False
        self.seek(self.cursor + delta)

    def action_step_engine(self, delta: int) -> None:
        """Jump to the end of the next (or previous) engine step: just after its `step` event."""
        if self.timeline is None:
            return
        self.playing = self.following = False
        target = self._marker("step", delta)
        self.seek(target if target is not None else (len(self.timeline) if delta > 0 else 0))

    def action_seek_fraction(self, fraction: float) -> None:
        if self.timeline is not None:
            self.playing = self.following = False
            self.seek(round(fraction * len(self.timeline)))

    def action_seek_marker(self, kind: str, direction: int) -> None:
        if self.timeline is None:
            return
        target = self._marker(kind, direction)
        if target is None:
            self.notify(f"no {'next' if direction > 0 else 'previous'} {kind}", timeout=2)
            return
        self.playing = self.following = False
        self.seek(target)
        event = self.timeline.events[target - 1]
        if "request_id" in event:
            self.view.request_id = event["request_id"]
            self.refresh_views()

    def _marker(self, kind: str, direction: int) -> int | None:
        """The next (direction > 0) or previous `kind` marker from the cursor, None when there is none."""
        find = self.timeline.next_marker if direction > 0 else self.timeline.prev_marker
        return find(kind, self.cursor)

    def action_speed(self, direction: int) -> None:
        i = min(range(len(SPEEDS)), key=lambda j: abs(SPEEDS[j] - self.speed))
        self.speed = SPEEDS[max(0, min(len(SPEEDS) - 1, i + direction))]
        self.refresh_views()

    def action_goto(self) -> None:
        self._open_input("goto", "go to: a percentage (50 or 50%) or an event number (#1234); Enter")

    def _goto(self, text: str) -> None:
        if self.timeline is None or not text:
            return
        try:
            if text.startswith("#"):
                target = int(text[1:])
            else:
                target = round(float(text.rstrip("%")) / 100 * len(self.timeline))
        except ValueError:
            self.notify(f"not a percentage or #event: {text!r}", severity="error", timeout=4)
            return
        self.playing = self.following = False
        self.seek(target)

    def on_scrubber_seek(self, message: Scrubber.Seek) -> None:
        self.playing = self.following = False
        self.seek(message.index)
