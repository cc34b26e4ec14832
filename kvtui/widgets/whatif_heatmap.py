"""The tier surface as a heat map: the token hit rate of every device x host capacity on a log-spaced grid (the
one-pass surface of kvtui/whatif/tiers.py, the summary's `tiers.surface`), each cell shaded from the panel's
colour (the surface's lowest hit rate) to the cached colour (its highest), the hit rate written in it. The first column (host
"-") is the device alone. The colours are the palette's roles, read from the theme, so a theme switch
restyles it."""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.color import Color
from textual.widget import Widget

from kvtui.whatif.capacity import human_tokens
from kvtui.widgets.palette import COMPONENT_CLASSES, Palette, role_css

CELL = 7
LABEL = 10


def _cell_text(rate: float) -> str:
    return f"{100 * rate:.0f}%".rjust(CELL - 1) + " "


class TierHeatMap(Widget):
    COMPONENT_CLASSES = COMPONENT_CLASSES
    DEFAULT_CSS = "TierHeatMap { height: auto; }\n" + role_css("TierHeatMap")

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.surface: dict | None = None
        self.display = False

    def show(self, surface: dict | None) -> None:
        if surface is not self.surface:
            self.surface = surface
            self.display = surface is not None
            self.refresh(layout=True)

    def get_content_height(self, container, viewport, width: int) -> int:
        return 0 if not self.surface else len(self.surface["device_tokens"]) + 2

    def render(self) -> Text:
        surface = self.surface
        if not surface:
            return Text("")
        palette = Palette.of(self)
        low = _color(palette["token-a"].bgcolor, Color(40, 40, 40))
        high = _color(palette["cached"].color, Color(0, 160, 0))
        disk = surface["disk_tokens"]
        rates = [r for row in surface["token_hit_rate"] for r in row]
        bottom = min(rates, default=0.0)
        spread = (max(rates, default=0.0) - bottom) or 1.0
        out = Text()
        out.append(
            "token hit rate, device (rows) x host (columns)"
            + (f", disk {human_tokens(disk)}" if disk else "")
            + ": the one-pass surface; host - is the device alone\n",
            style=palette["bold"],
        )
        out.append(f"{'device':>{LABEL - 1}} ", style=palette["dim"])
        for host in surface["host_tokens"]:
            out.append((human_tokens(host) if host else "-").rjust(CELL - 1) + " ", style=palette["dim"])
        for device, row in zip(surface["device_tokens"], surface["token_hit_rate"]):
            out.append("\n" + f"{human_tokens(device):>{LABEL - 1}} ", style=palette["dim"])
            for rate in row:
                shade = low.blend(high, (rate - bottom) / spread)
                text_color = shade.get_contrast_text(1.0)
                out.append(
                    _cell_text(rate), style=Style(color=text_color.rich_color, bgcolor=shade.rich_color)
                )
        return out


def _color(rich_color, fallback: Color) -> Color:
    return Color.from_rich_color(rich_color) if rich_color is not None else fallback
