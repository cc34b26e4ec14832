"""Colour roles: what every view means by a colour, as Textual theme variables (so any theme applies).

A view never names a colour. It names a *role*; the role maps to theme variables here, once, for every widget.
Line views (`LineView`, the `Scrubber`) carry each role as a component class `kv--<role>` (in COMPONENT_CLASSES
and DEFAULT_CSS, see `role_css`) and read it with `get_component_rich_style` once per theme (`Palette`); text
built for plain widgets (legends, summaries, the miss explainer) uses `Content` with the same roles as style
strings (`markup(role)`), resolved by Textual when it draws. Switching `app.theme` restyles everything.

The meaning of a colour stays the same in every theme:

    role          look                          concept
    free          $text-disabled                a free block (nothing in it)
    used          $primary                      a block in use; prefill work; what is done (scrubber)
    shared        $text on $secondary, bold     a block shared by several requests (ref count > 1)
    cached        $success                      cached (ref 0, kept in the prefix tree); served from cache
    writing       $text on $warning, bold       being written this step / this write to a ring
    evicted       $error, bold                  evicted, dropped, an error
    host, disk    $accent bold, $text-secondary a block held in a tier below the device (pool, tree); host-a/b
                                                (on $secondary): prompt tokens loaded back from host (miss explainer)
    kept          $text on $success             an edit kept this block's K/V
    dropped       $text on $error, bold         an edit dropped this block
    copied        $text on $primary, bold       an edit copied this block (copy-on-write)
    edit          $text-secondary, bold         an edit (the request's, the trace's)
    recompute     $warning                      recomputed although equal / after an edit point
    node          on $accent-muted, bold        the blocks of the radix node selected in the tree
    prefill, decode, mixed                      step kinds: $primary, $success, $accent
    dim, bold, heading, cursor                  $text-muted, bold, $text-accent bold, reverse
    slot, sink-slot, heavy-slot                 a ring slot: recent (on $panel), sink (on $primary, bold),
                                                heavy hitter (on $success-darken-1)
    kl-0 .. kl-3                                a token's KL divergence from the exact cache (8-bit K/V): on
                                                $panel, $success-darken-1, $warning-darken-1, $error (bold)

Owners (requests by arrival order) cycle through `OWNERS`. The states a block can be in (free, used, shared,
cached, writing, evicted) and the edit marks (kept, dropped, copied) are told apart in every built-in theme that
has distinct primary / secondary / success / warning / error colours (tests/kvtui/widgets/test_theming.py checks the
default theme and others).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from rich.style import Style
from textual._context import active_app
from textual.color import Color
from textual.theme import BUILTIN_THEMES


@dataclass(frozen=True)
class Role:
    """A look made of theme variables: foreground, background (either may be empty) and a text style."""

    color: str = ""
    background: str = ""
    text_style: str = ""

    def css(self) -> str:
        out = []
        if self.color:
            out.append(f"color: {self.color};")
        if self.background:
            out.append(f"background: {self.background};")
        if self.text_style:
            out.append(f"text-style: {self.text_style};")
        return " ".join(out)

    def markup(self) -> str:
        """The role as a Textual style string (for `Content`): `$text on $warning bold`."""
        parts = [self.color] if self.color else []
        if self.background:
            parts.append(f"on {self.background}")
        if self.text_style:
            parts.append(self.text_style)
        return " ".join(parts)


def _on(background: str, text_style: str = "") -> Role:
    """A role that colours the cell's background, with legible text over it."""
    return Role("$text", background, text_style)


ROLES: dict[str, Role] = {
    # generic text
    "dim": Role("$text-muted"),
    "bold": Role(text_style="bold"),
    "heading": Role("$text-accent", text_style="bold"),
    "cursor": Role(text_style="reverse"),
    # block states (pool, block table, legend, block details)
    "free": Role("$text-disabled"),
    "used": Role("$primary"),
    "shared": _on("$secondary", "bold"),
    "cached": Role("$success"),
    "writing": _on("$warning", "bold"),
    "evicted": Role("$error", text_style="bold"),
    # the tiers below the device: a block held in host (or disk) memory
    "host": Role("$accent", text_style="bold"),
    "disk": Role("$text-secondary"),
    # the last edit's boundary
    "kept": _on("$success"),
    "dropped": _on("$error", "bold"),
    "copied": _on("$primary", "bold"),
    "edit": Role("$text-secondary", text_style="bold"),
    "edit-mark": _on("$secondary", "bold"),
    "recompute": Role("$warning"),
    "recompute-mark": _on("$warning"),
    "node": Role(background="$accent-muted", text_style="bold"),
    # tokens (token strip, block details, miss explainer): alternating shades show token boundaries
    "token-a": _on("$panel"),
    "token-b": _on("$panel-lighten-2"),
    "prompt-a": _on("$primary-muted"),
    "prompt-b": _on("$primary-darken-2"),
    "generated-a": _on("$success-muted"),
    "generated-b": _on("$success-darken-2"),
    "matched-a": _on("$success"),
    "matched-b": _on("$success-darken-1"),
    "host-a": _on("$secondary"),
    "host-b": _on("$secondary-darken-2"),
    "equal-a": _on("$warning"),
    "equal-b": _on("$warning-darken-1"),
    "token-cursor": Role("$background", "$foreground", "bold"),
    "selected": _on("$accent-darken-1"),
    # engine steps (timeline lanes, roofline, mask) and radix marks
    "prefill": Role("$primary"),
    "decode": Role("$success"),
    "mixed": Role("$accent"),
    "running": Role("$success-muted"),
    "sink": Role("$accent"),
    "warning": Role("$warning", text_style="bold"),
    "insert-mark": _on("$success", "bold"),
    "hit-mark": _on("$primary", "bold"),
    "split-mark": _on("$warning", "bold"),
    "evict-mark": _on("$error", "bold"),
    # charts: a series' cumulative value is the darker shade of its windowed one
    "series-token": Role("$primary"),
    "series-token-cum": Role("$primary-darken-2"),
    "series-request": Role("$success"),
    "series-request-cum": Role("$success-darken-2"),
    "series-block": Role("$accent"),
    "series-block-cum": Role("$accent-darken-2"),
    "series-tokens": Role("$foreground"),
    "series-time": Role("$warning"),
    # rings
    "ring-bar": Role("$primary"),
    "full-bar": Role("$error"),
    "slot": _on("$panel"),
    "ring-head": Role("$warning", text_style="bold"),
    # a ring slot's role: recent is "slot"; sinks are kept forever; heavy hitters (H2O) for their attention
    "sink-slot": _on("$primary", "bold"),
    "heavy-slot": _on("$success-darken-1"),
    # a token's next-token KL divergence from the exact cache, by decade (kvtui/state/requests.py KL_BINS)
    "kl-0": _on("$panel"),
    "kl-1": _on("$success-darken-1"),
    "kl-2": _on("$warning-darken-1"),
    "kl-3": _on("$error", "bold"),
    # the scrubber
    "knob": Role("$foreground", text_style="bold"),
    "arrival": Role("$primary"),
    "miss": Role("$warning"),
    "eviction": Role("$error"),
    "preempt": _on("$error", "bold"),
}

# Request colours by arrival order: a request keeps its colour across frames, runs and snapshot tests.
OWNERS: tuple[Role, ...] = tuple(
    Role(v)
    for v in (
        "$primary",
        "$accent",
        "$success",
        "$text-secondary",
        "$error",
        "$primary-lighten-3",
        "$success-lighten-3",
        "$accent-darken-3",
        "$error-lighten-3",
        "$foreground",
    )
)
ROLES.update({f"owner-{i}": role for i, role in enumerate(OWNERS)})

PREFIX = "kv--"
COMPONENT_CLASSES: set[str] = {PREFIX + name for name in ROLES}


def role_css(type_name: str) -> str:
    """DEFAULT_CSS rules giving `type_name`'s component classes their looks."""
    return "\n".join(f"{type_name} > .{PREFIX}{name} {{ {role.css()} }}" for name, role in ROLES.items())


def markup(role: str) -> str:
    """A role as a style string for `Content`: the running app's theme resolved to concrete colours. Content
    drops the alpha of Textual's `auto N%` colours, so `$text-muted` and `$text-disabled` drew as bright as
    (brighter than) `$text`; outside an app, or under a theme that is not built in, the theme variables."""
    palette = _running_palette()
    if palette is None:
        return ROLES[role].markup()
    return _style_markup(palette[role], ROLES[role].text_style)


def owner_markup(ordinal: int) -> str:
    palette = _running_palette()
    role = OWNERS[ordinal % len(OWNERS)]
    if palette is None:
        return role.markup()
    return _style_markup(palette.owner(ordinal), role.text_style)


def _running_palette() -> Palette | None:
    app = active_app.get(None)
    theme = getattr(app, "theme", None)
    return theme_palette(theme) if theme in BUILTIN_THEMES else None


def _style_markup(style: Style, text_style: str) -> str:
    parts = [style.color.triplet.hex] if style.color is not None and style.color.triplet else []
    if style.bgcolor is not None and style.bgcolor.triplet:
        parts.append(f"on {style.bgcolor.triplet.hex}")
    if text_style:
        parts.append(text_style)
    return " ".join(parts)


class Palette:
    """The Rich style of every role for one widget under the current theme: `palette["free"]`.

    Each style holds only what its role sets (a foreground-only role has no background), so styles combine:
    `palette["used"] + palette["node"]`.
    """

    __slots__ = ("styles",)

    def __init__(self, styles: dict[str, Style]):
        self.styles = styles

    def __getitem__(self, role: str) -> Style:
        return self.styles[role]

    def owner(self, ordinal: int) -> Style:
        return self.styles[f"owner-{ordinal % len(OWNERS)}"]

    @classmethod
    def of(cls, widget) -> Palette:
        """Read every role from the widget's component styles (theme variables resolved by Textual)."""
        styles = {}
        for name, role in ROLES.items():
            full = widget.get_component_rich_style(PREFIX + name)
            styles[name] = _keep(
                role, full.color if role.color else None, full.bgcolor if role.background else None
            )
        return cls(styles)


def _keep(role: Role, color, bgcolor) -> Style:
    style = Style(color=color, bgcolor=bgcolor)
    return style + Style.parse(role.text_style) if role.text_style else style


def _resolve(value: str, variables: dict[str, str], under: Color) -> Color:
    """A theme variable (or `auto N%`) as a colour over `under`, the way Textual resolves it."""
    value = value.strip()
    while value.startswith("$"):
        value = variables[value[1:]]
    if value.startswith("auto"):
        alpha = float(value.split()[1].rstrip("%")) / 100 if len(value.split()) > 1 else 1.0
        # blended over what it is drawn on: a colour with alpha would lose it on the way to Rich
        return under + under.get_contrast_text(alpha)
    color = Color.parse(value)
    return under + color if color.a < 1 else color


@lru_cache(maxsize=8)
def theme_palette(theme_name: str = "textual-dark") -> Palette:
    """The palette of a built-in theme without an app: for views drawn before they are mounted (tests, bench)."""
    variables = BUILTIN_THEMES[theme_name].to_color_system().generate()
    base = Color.parse(variables["background"])
    styles = {}
    for name, role in ROLES.items():
        bg = _resolve(role.background, variables, base) if role.background else None
        fg = _resolve(role.color, variables, bg or base) if role.color else None
        styles[name] = _keep(role, fg.rich_color if fg else None, bg.rich_color if bg else None)
    return Palette(styles)
