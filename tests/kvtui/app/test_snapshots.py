"""SVG snapshots of every view on the synthetic fixture trace (update with --snapshot-update)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.trace import read_trace
from kvtui.app import KvtuiApp
from kvtui.state.timeline import Timeline

TRACE = Path(__file__).resolve().parents[3] / "fixtures" / "traces" / "synthetic_small.jsonl"


def make_app(cursor_fraction: float = 0.6) -> KvtuiApp:
    parsed = read_trace(TRACE, strict=True)
    app = KvtuiApp(
        Timeline(parsed.header, parsed.events),
        source="synthetic_small.jsonl",
        clock=lambda: 0.0,
        frame_rate=None,
    )
    app.initial_cursor = round(cursor_fraction * len(parsed.events))
    return app


async def _seek(pilot) -> None:
    app = pilot.app
    app.seek(app.initial_cursor)
    await pilot.pause()


@pytest.mark.parametrize("tab", ["1", "2", "3", "4", "5", "6"])
def test_each_view(snap_compare, tab):
    assert snap_compare(make_app(), press=[tab], terminal_size=(100, 30), run_before=_seek)


def test_pool_by_owner_with_selection_small_terminal(snap_compare):
    assert snap_compare(
        make_app(0.3), press=["o", "right", "right", "enter"], terminal_size=(80, 24), run_before=_seek
    )


def test_after_edit_boundary(snap_compare):
    async def to_edit(pilot):
        await pilot.press("e")
        await pilot.pause()

    assert snap_compare(make_app(0.0), press=["6"], terminal_size=(100, 30), run_before=to_edit)


def test_help(snap_compare):
    assert snap_compare(make_app(), press=["question_mark"], terminal_size=(100, 30), run_before=_seek)


REAL = Path(__file__).resolve().parents[1] / "data"


def real_app(name: str, folder: Path = REAL) -> KvtuiApp:
    """A recorded SmolLM2 trace, opened the way `kvtui replay` opens it (interesting point and request)."""
    parsed = read_trace(folder / f"{name}.jsonl", strict=True)
    return KvtuiApp(
        Timeline(parsed.header, parsed.events),
        source=f"{name}.jsonl",
        clock=lambda: 0.0,
        frame_rate=None,
        open_interesting=True,
    )


@pytest.mark.parametrize(
    "name,tab",
    [
        ("edit_series", "1"),
        ("edit_series", "3"),
        ("chat_template_jitter", "3"),
        ("multi_turn_chat", "6"),
        ("long", "1"),
        ("multi_turn_chat", "2"),
    ],
)
def test_real_trace_80x24(snap_compare, name, tab):
    assert snap_compare(real_app(name), press=[tab], terminal_size=(80, 24))


def test_real_trace_tree_node_highlighted_in_pool(snap_compare):
    assert snap_compare(
        real_app("edit_series"), press=["3", "down", "down", "enter"], terminal_size=(100, 30)
    )


def test_sinks_trace_rings(snap_compare):
    """`kvtui sinks --trace` on a tiny random model: the window, sinks and heavy-hitter rings, slots by role."""
    assert snap_compare(real_app("sinks_tiny"), press=["5"], terminal_size=(110, 34))


@pytest.mark.parametrize("tab", ["1", "3", "4"])
def test_host_tier(snap_compare, tab):
    """A host tier: its slots under the pool, its blocks in the tree and the miss explainer, hits by tier."""
    app = real_app("host_tier", TRACE.parent)
    assert snap_compare(app, press=[tab], terminal_size=(110, 34))


@pytest.mark.parametrize("keys", [[], ["w"]], ids=["states", "groups"])
def test_paged_window_groups(snap_compare, keys):
    """vLLM's paged layout on a tiny Gemma 3 (two window groups and the full one sharing 24 blocks): under r0's
    block table each window group's blocks, those before the window freed; `w` colors the pool by group."""
    app = real_app("paged_tiny")

    async def to_window(pilot):
        pilot.app.seek(60)
        await pilot.pause()

    assert snap_compare(app, press=["1", *keys], terminal_size=(110, 30), run_before=to_window)
