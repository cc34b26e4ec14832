"""The documentation's screenshots, taken from the real app on the fixture traces.

    python -m kvtui.docs_tool.screenshots docs/img            every shot
    python -m kvtui.docs_tool.screenshots docs/img pool rings only these

Each shot opens a fixture trace the way `kvtui replay` opens it (at its end or busiest step, with its most
telling request selected), presses the shot's keys headless (`App.run_test`) and writes Textual's SVG export.
The clock is fixed and the frame timer off, so a shot changes only when the app or the trace does.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Shot:
    # the file's stem under the output folder, and the name to pick it on the command line
    name: str
    # a fixture trace, relative to the repository root
    trace: str
    # keys pressed after the app opened
    keys: tuple[str, ...]
    # what the shot shows: the SVG's title
    title: str
    size: tuple[int, int] = (110, 34)
    # open just after this engine step instead of where `kvtui replay` opens
    step: int | None = None
    # the trace is made first by `kvtui whatif TRACE ARGS -o ...` (a what-if run of that fixture)
    whatif: tuple[str, ...] = ()


SHOTS: tuple[Shot, ...] = (
    Shot(
        "pool",
        "fixtures/traces/edit_series.jsonl",
        ("1",),
        "1 Pool: blocks, the block table, an edit",
        step=48,
    ),
    Shot("requests", "fixtures/traces/concurrent8.jsonl", ("2",), "2 Requests: lanes, TTFT / TPOT / ITL"),
    Shot(
        "tree", "fixtures/traces/chat_template_jitter.jsonl", ("3",), "3 Prefix tree and the miss explainer"
    ),
    Shot("metrics", "fixtures/traces/shared_system_8users.jsonl", ("4",), "4 Metrics: hit rates, KV memory"),
    Shot("rings", "fixtures/traces/streaming_sinks.jsonl", ("5",), "5 Rings: sliding-window layers"),
    Shot("tokens", "fixtures/traces/multi_turn_chat.jsonl", ("6",), "6 Tokens: the token strip"),
    Shot(
        "masks", "fixtures/traces/gemma3_hybrid_window.jsonl", ("k",), "k: attention masks of a step", step=40
    ),
    Shot(
        "roofline",
        "fixtures/traces/agents_shared_background.jsonl",
        ("l",),
        "l: prefill vs decode on the roofline",
    ),
    Shot(
        "whatif",
        "fixtures/traces/shared_system_8users.jsonl",
        ("7",),
        "7 What if: hit rate against capacity, miss causes",
        whatif=("--capacity", "256,1k,4k"),
    ),
    Shot(
        "whatif-latency",
        "fixtures/attach/vllm_0.32_proxy_waves.jsonl",
        ("7",),
        "7 What if on a vLLM proxy log with --calibrate: predicted against served TTFT",
        (110, 50),
        whatif=("--calibrate",),
    ),
    Shot("host-pool", "fixtures/traces/host_tier.jsonl", ("1",), "1 Pool with a host tier: its slots below"),
    Shot(
        "host-tree",
        "fixtures/traces/host_tier.jsonl",
        ("3",),
        "3 Prefix tree with a host tier: host blocks under their parents, tokens from host",
    ),
    Shot(
        "paged-groups",
        "fixtures/traces/gemma3_paged_groups.jsonl",
        ("1", "w"),
        "1 Pool in vLLM's paged layout: six KV-cache groups share the pool, window blocks freed",
        step=10,
    ),
    Shot("help", "fixtures/traces/chat.jsonl", ("question_mark",), "?: help", (110, 40)),
    Shot("fleet", "fixtures/attach/concurrent8_smollm2.jsonl", ("1",), "kvtui attach: the fleet"),
    Shot("fleet-tree", "fixtures/attach/concurrent8_smollm2.jsonl", ("2",), "kvtui attach: the hash tree"),
)


def _whatif_trace(shot: Shot, out: Path) -> Path:
    """`kvtui whatif` of the shot's fixture, its first configuration written as a trace."""
    from kvtui.cli import main

    path = out / f"{shot.name}.jsonl"
    # its report is not the shot's business
    with contextlib.redirect_stdout(io.StringIO()):
        main(["whatif", str(ROOT / shot.trace), *shot.whatif, "-o", str(path)], standalone_mode=False)
    return path


def _app(shot: Shot, trace: Path):
    """The app `kvtui replay` would open on the trace, with a fixed clock and no frame timer."""
    from engine.trace import read_trace

    parsed = read_trace(trace, strict=True)
    source = Path(shot.trace).name
    if parsed.header.get("kind") == "attach":
        from kvtui.app.fleet_app import FleetApp

        return FleetApp(source=source, header=parsed.header, events=parsed.events, frame_rate=None)
    from kvtui.app import KvtuiApp
    from kvtui.state.timeline import Timeline

    app = KvtuiApp(
        Timeline(parsed.header, parsed.events),
        source=source,
        clock=lambda: 0.0,
        frame_rate=None,
        open_interesting=shot.step is None,
    )
    if shot.step is not None:
        app.initial_cursor = next(
            i + 1 for i, ev in enumerate(parsed.events) if ev["type"] == "step" and ev["step"] == shot.step
        )
    return app


async def take(shot: Shot, trace: Path) -> str:
    """The SVG of one shot of the app on `trace`."""
    app = _app(shot, trace)
    async with app.run_test(size=shot.size) as pilot:
        await pilot.pause()
        if shot.step is not None:
            app.seek(app.initial_cursor)
            await pilot.pause()
        for key in shot.keys:
            await pilot.press(key)
            await pilot.pause()
        await pilot.pause()
        return app.export_screenshot(title=shot.title)


def write_shots(out: Path, names: list[str] | None = None) -> list[Path]:
    """Write the chosen shots (all by default) as OUT/NAME.svg; return the paths written."""
    unknown = sorted(set(names or ()) - {shot.name for shot in SHOTS})
    if unknown:
        raise SystemExit(f"no such shot: {', '.join(unknown)} (shots: {', '.join(s.name for s in SHOTS)})")
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for shot in SHOTS:
        if names and shot.name not in names:
            continue
        path = out / f"{shot.name}.svg"
        if shot.whatif:
            with tempfile.TemporaryDirectory() as tmp:
                svg = asyncio.run(take(shot, _whatif_trace(shot, Path(tmp))))
        else:
            svg = asyncio.run(take(shot, ROOT / shot.trace))
        path.write_text(svg, encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str]) -> None:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return
    for path in write_shots(Path(argv[0]), argv[1:]):
        print(path)


if __name__ == "__main__":
    main(sys.argv[1:])
