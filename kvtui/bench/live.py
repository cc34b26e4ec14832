"""Frame time while a live engine decodes flat out: `kvtui bench live [--device cpu] [--seconds 20]`.

Runs the real live app headless at 200x60 (or --size) on the real model: the engine thread decodes several
prompts at once while the UI drains events at 30 frames/s. Every frame is timed in two parts: `tick` (drain the
feed, fold events, refresh the views) and the screen update that follows (layout if needed, compositor render
of the dirty lines). It cycles the tabs so each view is measured, and measures event-loop lag (how late a
33 ms timer fires), which is what a key press waits for. The target is <= 33 ms per frame.
"""

from __future__ import annotations

import asyncio
import statistics
import time

PROMPTS = [
    "Explain what a KV cache stores, in detail.",
    "Write a short story about a lighthouse keeper.",
    "List ten facts about the planet Mars.",
    "Describe how a bicycle works.",
]
TABS = ("pool", "requests", "tree", "metrics", "tokens")
TAB_KEYS = {"pool": "1", "requests": "2", "tree": "3", "metrics": "4", "tokens": "6"}


def _pcts(values: list[float]) -> str:
    if not values:
        return "n=0"
    ordered = sorted(values)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return (
        f"p50 {statistics.median(ordered) * 1000:.1f} ms · p95 {pick(0.95) * 1000:.1f} ms · "
        f"max {ordered[-1] * 1000:.1f} ms (n={len(ordered)})"
    )


def run(
    model: str, device: str, seconds: float, size: tuple[int, int], max_tokens: int, num_blocks: int
) -> dict:
    from textual.screen import Screen

    from engine.engine import EngineConfig
    from kvtui.app import KvtuiApp
    from kvtui.app.feed import EngineWorker, EventFeed

    feed = EventFeed()
    worker = EngineWorker(feed, model, EngineConfig(device=device, num_blocks=num_blocks))
    app = KvtuiApp(
        source=model, live=True, feed=feed, controller=worker, frame_rate=30.0, max_tokens=max_tokens
    )
    ticks: list[float] = []
    paints: list[float] = []
    frames: list[float] = []
    lags: list[float] = []
    per_tab: dict[str, list[float]] = {tab: [] for tab in TABS}
    state = {"last_tick": 0.0, "measuring": False}

    original_tick = app.tick

    def timed_tick() -> None:
        t0 = time.perf_counter()
        original_tick()
        dt = time.perf_counter() - t0
        if state["measuring"]:
            ticks.append(dt)
        state["last_tick"] = dt

    app.tick = timed_tick
    original_paint = Screen._on_timer_update

    def timed_paint(screen) -> None:
        t0 = time.perf_counter()
        original_paint(screen)
        dt = time.perf_counter() - t0
        if state["measuring"]:
            paints.append(dt)
            frame = state["last_tick"] + dt
            frames.append(frame)
            per_tab[app.query_one("#tabs").active].append(frame)
            state["last_tick"] = 0.0

    Screen._on_timer_update = timed_paint
    out: dict = {}

    async def main() -> None:
        async with app.run_test(size=size) as pilot:
            worker.start()
            t0 = time.perf_counter()
            while app.timeline is None and time.perf_counter() - t0 < 120:
                await asyncio.sleep(0.1)
            if app.timeline is None:
                raise SystemExit("the model did not load within 120 s")
            out["load_s"] = time.perf_counter() - t0
            for prompt in PROMPTS:
                worker.submit(prompt, max_tokens)
            # leave the prompt box, so tab keys switch tabs
            await pilot.press("escape")
            # let the prefills start
            await asyncio.sleep(1.0)
            n0 = len(app.timeline)
            tokens0 = app.timeline.tip.counts.get("token_emitted", 0)
            state["measuring"] = True
            start = time.perf_counter()
            expected = start
            i = 0
            while time.perf_counter() - start < seconds:
                expected += 1 / 30
                await asyncio.sleep(max(0.0, expected - time.perf_counter()))
                lags.append(max(0.0, time.perf_counter() - expected))
                expected = time.perf_counter()
                i += 1
                # a tab switch every second, as a user would
                if i % 30 == 0:
                    await pilot.press(TAB_KEYS[TABS[(i // 30) % len(TABS)]])
            elapsed = time.perf_counter() - start
            state["measuring"] = False
            out["events_per_s"] = (len(app.timeline) - n0) / elapsed
            out["tokens_per_s"] = (app.timeline.tip.counts.get("token_emitted", 0) - tokens0) / elapsed
            worker.stop()
            worker.thread.join(timeout=5)

    try:
        asyncio.run(main())
    finally:
        Screen._on_timer_update = original_paint
    out.update(
        tick=_pcts(ticks),
        paint=_pcts(paints),
        frame=_pcts(frames),
        loop_lag=_pcts(lags),
        **{f"frame[{tab}]": _pcts(v) for tab, v in per_tab.items()},
    )
    return out


def format_result(result: dict) -> str:
    return "\n".join(
        f"{key:>18}: {value if isinstance(value, str) else f'{value:,.1f}'}" for key, value in result.items()
    )
