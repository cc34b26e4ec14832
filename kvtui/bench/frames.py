"""Frame times (`kvtui bench frames`, also part of `kvtui bench ui`): each view's full-screen render, and a
live-mode frame."""

from __future__ import annotations

import asyncio
import time

from kvtui.state import replay
from kvtui.widgets.base import View
from kvtui.widgets.block_pool import BlockPoolView
from kvtui.widgets.charts import ChartsView
from kvtui.widgets.radix_tree import RadixTreeView
from kvtui.widgets.ring import RingView
from kvtui.widgets.timeline import TimelineView
from kvtui.widgets.token_strip import TokenStrip

WIDTH, HEIGHT = 200, 60


def bench_frames(header: dict, events: list[dict], repeat: int = 5) -> dict[str, float]:
    """Milliseconds to build HEIGHT lines of each view at WIDTH columns (no app: the Line API cost)."""
    state = replay(header, events)
    rid = state.order[-1] if state.order else None
    out = {}
    for cls in (BlockPoolView, RadixTreeView, TimelineView, ChartsView, RingView, TokenStrip):
        widget = cls(View(state, rid))
        widget.DEFAULT_WIDTH = WIDTH
        t0 = time.perf_counter()
        for _ in range(repeat):
            # defeat per-state caches
            widget._rows_key = None if hasattr(widget, "_rows_key") else None
            widget._cache_key = None
            widget._layout_key = None
            for y in range(HEIGHT):
                widget.render_line(y)
        out[cls.__name__] = (time.perf_counter() - t0) / repeat * 1000
    for per_frame in (50, 2000):
        out[
            f"live frame at {WIDTH}x{HEIGHT}, {per_frame} new events per frame (ingest + refresh + paint)"
        ] = bench_live_frame(header, events, per_frame=per_frame)
    return out


def bench_live_frame(header: dict, events: list[dict], per_frame: int = 2000, frames: int = 30) -> float:
    """A headless live app fed `per_frame` events per frame: median ms of pump + refresh + screen update.

    `pilot.pause()` itself costs a fixed ~20 ms here even when nothing changed (it waits for the app to go
    idle), so the median of idle pauses is measured too and subtracted.
    """
    from kvtui.app import KvtuiApp
    from kvtui.app.feed import EventFeed
    from kvtui.app.feed_messages import FeedHeader

    feed = EventFeed()
    app = KvtuiApp(source="bench", live=True, feed=feed, frame_rate=None)
    times: list[float] = []
    idle: list[float] = []

    async def run() -> None:
        async with app.run_test(size=(WIDTH, HEIGHT)) as pilot:
            feed.put(FeedHeader(header))
            app.pump()
            await pilot.press("escape")
            for i in range(frames):
                for ev in events[i * per_frame : (i + 1) * per_frame]:
                    feed.put_event(ev)
                t0 = time.perf_counter()
                app.tick()
                await pilot.pause()
                times.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                await pilot.pause()
                idle.append(time.perf_counter() - t0)

    asyncio.run(run())
    times.sort()
    idle.sort()
    # a frame cheaper than the pause's own jitter would come out negative: it costs nothing measurable
    return max(times[len(times) // 2] - idle[len(idle) // 2], 0.0) * 1000


def format_ms(ms: float) -> str:
    """A frame time as printed: below 0.01 ms it is within the noise of the idle pause subtracted."""
    return f"{ms:.2f} ms" if ms >= 0.01 else "< 0.01 ms (within the noise of an idle pause)"
