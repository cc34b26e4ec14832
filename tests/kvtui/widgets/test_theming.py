"""The views take their looks from the Textual theme: no colour literal in widget code, a theme switch restyles
the views, and each concept's colour role stays distinguishable in the built-in themes."""

from __future__ import annotations

import ast
import re
from itertools import combinations
from pathlib import Path

import pytest
from rich.errors import StyleSyntaxError
from rich.style import Style

from engine.trace import read_trace
from kvtui.app import KvtuiApp
from kvtui.state.timeline import Timeline
from kvtui.widgets.block_pool import BlockPoolView
from kvtui.widgets.palette import ROLES, theme_palette
from kvtui.widgets.scrubber import Scrubber
from kvtui.widgets.token_strip import TokenStrip

ROOT = Path(__file__).resolve().parents[3]
WIDGET_SOURCES = [
    *sorted((ROOT / "kvtui" / "widgets").glob("*.py")),
    *sorted((ROOT / "kvtui" / "screens").glob("*.py")),
]
HEX = re.compile(r"#[0-9a-fA-F]{6}\b|#[0-9a-fA-F]{3}\b")
NAMED = re.compile(
    r"\b(black|red|green|yellow|blue|magenta|cyan|white|gr[ae]y\d*|bright_\w+|purple|orange)\b"
)
THEMES = ("textual-dark", "textual-light", "nord", "gruvbox")


def test_the_scan_finds_a_colour_literal():
    assert HEX.search('Style(color="#4e9ad6")') and HEX.search("on #abc")
    assert _style_literals('x = Style(color="red")\ny = "bold white on blue"\n"""green: docs are prose"""')
    assert not HEX.search("#12 and issue #16")


def _style_literals(source: str) -> list[str]:
    """String constants (not docstrings) that are Rich styles naming a colour, and Style(color=...) literals."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "Style":
            found += [
                f"Style({kw.arg}={ast.unparse(kw.value)})"
                for kw in node.keywords
                if kw.arg in ("color", "bgcolor") and isinstance(kw.value, ast.Constant)
            ]
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
            and NAMED.search(node.value)
            and _is_style(node.value)
        ):
            found.append(node.value)
    return found


def _is_style(text: str) -> bool:
    try:
        Style.parse(text)
    except StyleSyntaxError:
        return False
    return True


@pytest.mark.parametrize("path", WIDGET_SOURCES, ids=lambda p: p.name)
def test_no_colour_literal_in_widget_code(path):
    source = path.read_text()
    assert not HEX.findall(source), f"{path.name}: hex colours {HEX.findall(source)}; use a role (palette.py)"
    assert not _style_literals(source), f"{path.name}: named colours {_style_literals(source)}"


def test_app_css_colours_are_theme_variables():
    css = (ROOT / "kvtui" / "app" / "app.tcss").read_text()
    assert not HEX.findall(css)
    for match in re.finditer(r"(?:color|background|border[\w-]*|tint):\s*([^;]+);", css):
        assert "$" in match.group(1) or match.group(1).strip() in ("none", "transparent"), match.group(0)


# the concepts drawn side by side, whose colours must be told apart
GROUPS = {
    "block states": ("free", "used", "shared", "cached", "writing", "evicted", "host"),
    "tiers": ("cached", "host", "disk", "free"),
    "matched tokens": ("matched-a", "matched-b", "host-a", "host-b", "token-a", "token-b"),
    "edit marks": ("kept", "dropped", "copied"),
    "mask regions": ("cached", "prefill", "sink", "evicted"),
    "tree marks": ("insert-mark", "hit-mark", "split-mark", "evict-mark"),
    "step kinds": ("prefill", "decode", "mixed"),
    "scrubber marks": ("preempt", "edit", "eviction", "miss", "arrival"),
    "prompt tokens": ("prompt-a", "prompt-b", "generated-a", "generated-b"),
    "ring slots": ("slot", "sink-slot", "heavy-slot", "writing"),
}


def key_colour(theme: str, role: str) -> tuple[str, object]:
    """What a role is recognised by: its background where it sets one (a filled cell), else its foreground."""
    style = theme_palette(theme)[role]
    if ROLES[role].background:
        return "filled", style.bgcolor.get_truecolor()
    return "text", style.color.get_truecolor()


@pytest.mark.parametrize("theme", THEMES)
@pytest.mark.parametrize("group", GROUPS)
def test_roles_are_distinct_in_the_theme(theme, group):
    roles = GROUPS[group]
    for a, b in combinations(roles, 2):
        assert key_colour(theme, a) != key_colour(theme, b), (theme, group, a, b)


def test_roles_follow_the_theme():
    dark, light = theme_palette("textual-dark"), theme_palette("textual-light")
    assert dark["used"] != light["used"] and dark["free"] != light["free"]
    nord = theme_palette("nord")
    assert nord["used"].color.get_truecolor().hex.upper() == "#88C0D0"
    assert nord["cached"].color.get_truecolor().hex.upper() == "#A3BE8C"


TRACE = ROOT / "fixtures" / "traces" / "synthetic_small.jsonl"


def make_app() -> KvtuiApp:
    parsed = read_trace(TRACE, strict=True)
    app = KvtuiApp(
        Timeline(parsed.header, parsed.events),
        source="synthetic_small.jsonl",
        clock=lambda: 0.0,
        frame_rate=None,
    )
    app.initial_cursor = round(0.6 * len(parsed.events))
    return app


def looks(widget, rows: int) -> set[tuple]:
    """The (foreground, background) pairs a widget draws in its first rows."""
    out = set()
    for y in range(rows):
        for seg in widget.render_line(y):
            if seg.text.strip() and seg.style is not None:
                out.add(
                    (
                        seg.style.color and seg.style.color.get_truecolor(),
                        seg.style.bgcolor and seg.style.bgcolor.get_truecolor(),
                    )
                )
    return out


@pytest.mark.anyio
async def test_switching_the_theme_restyles_the_views():
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        app.seek(app.initial_cursor)
        await pilot.pause()
        pool, scrubber = app.query_one(BlockPoolView), app.query_one(Scrubber)
        before = {"pool": looks(pool, 3), "scrubber": looks(scrubber, 2)}
        await pilot.press("6")
        await pilot.pause()
        strip = app.query_one(TokenStrip)
        before["strip"] = looks(strip, 5)
        assert pool.palette()["used"].color.get_truecolor().hex.upper() == "#0178D4"
        app.theme = "textual-light"
        await pilot.pause()
        await pilot.pause()
        after = {"pool": looks(pool, 3), "scrubber": looks(scrubber, 2), "strip": looks(strip, 5)}
        for name, old in before.items():
            assert old and after[name] and old != after[name], name
        light = theme_palette("textual-light")
        # the palette read from the widget's component classes is the theme's
        assert pool.palette()["used"] == light["used"]
        assert strip.palette()["prompt-b"].bgcolor == light["prompt-b"].bgcolor
        app.theme = "nord"
        await pilot.pause()
        await pilot.pause()
        assert looks(strip, 5) != after["strip"]
        assert pool.palette()["cached"].color.get_truecolor().hex.upper() == "#A3BE8C"
