"""The status line of `KvtuiApp`: mode, source, playback, speed, event, engine step, time and the selected
request. Narrower than all that, it loses detail in a fixed order (the time, the event's type, the hints in
parentheses, the source's length), never the step or the request."""

from __future__ import annotations

from rich.cells import cell_len

SOURCE_SHORT = 24


def status_line(app, width: int | None = None) -> str:
    # app: the KvtuiApp (not imported: the app imports this module)
    tl, state = app.timeline, app.state
    mode = "LIVE" if app.live else "replay"
    source = app.source.rsplit("/", 1)[-1]
    if app.loading is not None:
        done, total, n = app.loading
        return f" loading {source}… {100 * done / max(1, total):.0f}% · {n:,} events"
    if tl is None or state is None:
        if app.live and app.engine_dead:
            return f" kvtui {mode} · {source} · ENGINE STOPPED: {app.engine_dead}"
        return (
            f" kvtui {mode} · {source} · waiting for the engine…"
            if app.live
            else f" replay {source} · no trace loaded"
        )
    play, short_play = _play(app)
    last = state.last_event["type"] if state.last_event else "start"
    running = state.step_in_progress
    step = f"step {running} (in progress)" if running is not None else f"step {max(state.step, 0)}"
    chat = " · chat" if app.live and app.chat else ""
    rid = app.view.request_id or "-"
    event = f"event {app.cursor}/{len(tl)}"
    short_source = source if len(source) <= SOURCE_SHORT else source[: SOURCE_SHORT - 1] + "…"
    candidates = [
        f" {mode} {source} {play} {app.speed:g}x · {event} {last} · {step} · {state.t:.2f}s · {rid}{chat}",
        f" {mode} {source} {play} {app.speed:g}x · {event} {last} · {step} · {rid}{chat}",
        f" {mode} {source} {play} {app.speed:g}x · {event} · {step} · {rid}{chat}",
        f" {mode} {source} {short_play} {app.speed:g}x · {event} · {step} · {rid}{chat}",
        f" {mode} {short_source} {short_play} {app.speed:g}x · {event} · {step} · {rid}{chat}",
        f" {short_source} {short_play} · {event} · {step} · {rid}",
    ]
    if width is None:
        return candidates[0]
    return next((c for c in candidates if cell_len(c) <= width), candidates[-1])


def _play(app) -> tuple[str, str]:
    """What playback (or the live feed) is doing: in full, and without the hints."""
    if app.live:
        play = short = "following" if app.following else "paused"
        if not app.following:
            play += " (F: follow)"
        if app.held:
            play += " · engine HELD (n: one step, h: resume)"
            short += " · HELD"
        if app.engine_dead:
            play = short = "ENGINE STOPPED"
        return play, short
    if app.playing:
        skipped = f" (skipped {app.skipped_idle:.1f}s with no events)" if app.skipped_idle else ""
        return "▶ playing" + skipped, "▶ playing"
    if app.cursor >= len(app.timeline):
        return "at the end (space: play from start)", "at the end"
    return "paused", "paused"
