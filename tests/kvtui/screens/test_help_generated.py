"""`?` is built from the app: every binding of every screen and view, the tabs this trace shows (tab 7 for a
what-if trace), and what this trace adds (a host tier, 8-bit K/V)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from engine.engine import Engine, EngineConfig, SamplingParams
from engine.trace import read_trace
from kvtui.app import KvtuiApp
from kvtui.app.tabs import TABS
from kvtui.screens.help import HelpScreen
from kvtui.screens.palette import key_display, own_bindings
from kvtui.screens.panel import PanelScreen
from kvtui.state.timeline import Timeline
from tests.helpers.tiny_models import random_prompts, tiny_model

pytestmark = pytest.mark.anyio
TRACES = Path(__file__).resolve().parents[3] / "fixtures" / "traces"
SIZE = (100, 34)


def _app(header: dict, events: list[dict]) -> KvtuiApp:
    return KvtuiApp(Timeline(header, events), source="t", clock=lambda: 0.0, frame_rate=None)


def _every_binding(app: KvtuiApp) -> list:
    """The app's, every kvtui widget's in its screen, and the screens it pushes (panels, this help)."""
    bindings = list(app.BINDINGS)
    for widget in app.screen_stack[0].walk_children():
        bindings += own_bindings(type(widget))
    return bindings + own_bindings(PanelScreen) + own_bindings(HelpScreen)


async def _help(app: KvtuiApp, pilot) -> str:
    await pilot.press("question_mark")
    assert isinstance(app.screen, HelpScreen)
    return app.screen.markdown


async def test_every_binding_of_every_screen_is_in_the_help():
    parsed = read_trace(TRACES / "synthetic_small.jsonl", strict=True)
    app = _app(parsed.header, parsed.events)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        text = await _help(app, pilot)
        bindings = _every_binding(app)
        assert len(bindings) > 50
        for binding in bindings:
            assert f"| `{key_display(binding)}` | {binding.description} |" in text, binding
        # six tabs for a plain trace, no what-if tab and nothing of tiers or 8-bit K/V
        assert "## Views (keys 1-6)" in text and "**What if**" not in text
        assert "Host tier" not in text and "8-bit K/V" not in text
        assert "### Everywhere (`7`: no such tab in this trace)" in text
        for n, tab in enumerate(list(TABS.values())[:6], 1):
            assert f"{n}. **{tab.title}** - " in text


async def test_a_host_tier_trace_explains_its_tier_views():
    parsed = read_trace(TRACES / "host_tier.jsonl", strict=True)
    app = _app(parsed.header, parsed.events)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        text = await _help(app, pilot)
        assert (
            "**Host tier** (host: 6 slots)" in text and "blocks held on host hang under their parent" in text
        )


async def test_an_8_bit_trace_says_so():
    engine = Engine.from_model(
        tiny_model("llama-gqa"),
        config=EngineConfig(device="cpu", block_size=4, num_blocks=32, kv_dtype="int8"),
    )
    events: list[dict] = []
    engine.trace.listeners.append(events.append)
    engine.submit(random_prompts([9])[0], SamplingParams(max_tokens=2))
    engine.step()
    app = _app(engine.trace.header, events)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        text = await _help(app, pilot)
        assert "**8-bit K/V** (int8): the legend says `K/V int8`" in text
        assert "bytes-per-token formula shows each row's 4-byte scale" in text


async def test_a_what_if_trace_has_tab_7_in_the_help(tmp_path):
    from kvtui.cli import main

    out = tmp_path / "sim.jsonl"
    result = CliRunner().invoke(
        main,
        ["whatif", str(TRACES / "shared_system_8users.jsonl"), "--capacity", "256", "-o", str(out), "-q"],
    )
    assert result.exit_code == 0, result.output
    parsed = read_trace(out, strict=True)
    app = _app(parsed.header, parsed.events)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        text = await _help(app, pilot)
        assert "## Views (keys 1-7)" in text and "7. **What if** - " in text
