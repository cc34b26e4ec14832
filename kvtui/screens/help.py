"""`?`: built from the app as it is. The tabs this trace shows (their text is in `TABS`, kvtui/app/tabs.py),
what this trace adds to them (a host tier, 8-bit K/V, measured precision, a sinks experiment), the concepts
behind the views, and every key of every screen, read from the bindings (so a key added is a key explained)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown

from kvtui.screens.palette import key_display
from kvtui.widgets.palette import ROLES


def edit_colours() -> str:
    """The edit marks in words that hold in every theme, read from the palette's roles (not colour names)."""

    def colour(role: str) -> str:
        return ROLES[role].background.lstrip("$").replace("-", " ")

    return (
        f"kept on the theme's {colour('kept')} colour, dropped on its {colour('dropped')} colour, copied on its "
        f"{colour('copied')} colour (the edit line above the grid shows the three)"
    )


INTRO = """\
# kvtui help

kvtui draws a **trace**: every fact the engine reports about its KV cache. Live mode runs a model and
shows its trace as it happens; replay reads a saved trace. The *cursor* is a point in the trace: every view
shows the cache exactly as it was after that event.
"""

CONCEPTS = """\
## Concepts
- **KV cache**: in a causal decoder K/V of position j depend only on tokens <= j, so they are computed once
  and reused. Bytes = 2 x layers x kv_heads x head_dim x bytes_per_elem x tokens (KV heads, not query heads).
- **Paging**: fixed blocks of `block_size` tokens; a request's block table maps logical -> physical blocks;
  only the last block of a sequence wastes slots (tail waste).
- **Prefix cache**: reuse needs the identical token-id prefix from position 0; a token equal again after the
  first difference is never a hit. The radix tree matches whole blocks; the default engine then also reuses
  the first tokens of a partly filled cached block (the tail a request left, or the next block up to the first
  difference), copied before the request writes into it (the miss explainer says how many). With
  `--whole-blocks` only whole blocks are reused, as vLLM and SGLang do. The last prompt token is always
  computed.
- **Hit rates**: token = hit tokens / prompt tokens that could match; request = requests with any hit /
  requests; block = block hits / block lookups. Cumulative and over a window of recent requests.
- **TTFT** = queueing + prefill + sampling up to the first token. **TPOT** = (t_last - t_first) / (n - 1),
  undefined for one token. **ITL** = gap between consecutive tokens of one request. Percentiles interpolate
  (p50 of 1, 2, 3, 4 is 2.5), the same as `kvtui stats`; an edited request counts with its latest run.
- **Edit boundary**: editing position m keeps the K/V of positions < m in every layer (whole blocks before
  m's block; the valid part of m's block, copied first if shared) and recomputes from m on.
- **Ring window**: window W = the current token plus the W-1 before it; slot = position mod W, so writing
  position p overwrites p - W.
- **Copy-on-write**: a fork shares every block (ref count > 1); the first write to a shared block copies it.

## Live mode
`h` holds the engine between two steps, so that the pool, the tree and the tokens stay as they are while you
look (a short request otherwise finishes in about two seconds, before sharing or copy-on-write can be seen);
`n` then runs one step; `h` again resumes. Edits go to the engine's present (see tab Tokens).

## The scrubber (bottom)
The bar is the whole trace, `●` the cursor; click it to seek. The row above marks where things happen:
`A` a request arrives, `E` an edit, `x` a block evicted, `m` a prompt missed the cache (part of it computed),
`P` a request preempted. Where several share a column the first in P E x m A shows. `a` `e` `x` `m` jump to
the next one of a kind, shift (`A` `E` `X` `M`) to the previous.
"""


def trace_notes(state) -> dict[str, list[str]]:
    """What this trace adds to the tabs, by tab id: the views that show only where the trace has it."""
    notes: dict[str, list[str]] = {}
    if state is None:
        return notes

    def add(tab: str, text: str) -> None:
        notes.setdefault(tab, []).append(text)

    if state.kv_dtype:
        add(
            "pool",
            f"**8-bit K/V** ({state.kv_dtype}): the legend says `K/V {state.kv_dtype}`; a block's bytes are a "
            "byte a value plus a float32 scale per token and KV head.",
        )
        add("metrics", "**8-bit K/V**: the bytes-per-token formula shows each row's 4-byte scale.")
    if state.tier_capacity:
        tiers = ", ".join(f"{name}: {size} slots" for name, size in state.tier_capacity.items())
        add(
            "pool",
            f"**Host tier** ({tiers}): its slots under the device's blocks (`□` held, `·` free), rows `h0`...",
        )
        add("tree", "**Host tier**: blocks held on host hang under their parent in the host colour (`host`).")
        add("metrics", "**Host tier**: hit tokens by the tier that served them and each tier's traffic.")
    if state.counts.get("kv_divergence"):
        add(
            "tokens",
            "**Measured precision**: each token coloured by the KL divergence of its next-token "
            "distribution from the exact cache's, by decade.",
        )
    if state.header.get("kind") == "sinks":
        add(
            "rings", "**Sinks experiment** (`kvtui sinks --trace`): rings only, no blocks; the story is here."
        )
    return notes


def help_markdown(
    tabs: list[tuple[int, str, str, str]],
    notes: dict[str, list[str]],
    key_groups: list[tuple[str, list[Binding]]],
) -> str:
    """The help: (number, id, title, text) of each tab shown, what this trace adds to them, the concepts, and a
    table of keys per screen or view."""
    parts = [INTRO, f"## Views (keys 1-{len(tabs)})" if tabs else "## Views"]
    for number, tab_id, title, text in tabs:
        parts.append(
            f"{number}. **{title}** - " + text.replace("{EDIT_COLOURS}", edit_colours()).replace("\n", " ")
        )
        parts += [f"   - {note}" for note in notes.get(tab_id, ())]
    parts += ["", CONCEPTS, "## Keys"]
    for title, bindings in key_groups:
        parts += ["", f"### {title}", "", "| key | what |", "|---|---|"]
        parts += [f"| `{key_display(b)}` | {b.description} |" for b in bindings]
    return "\n".join(parts) + "\n"


class HelpScreen(ModalScreen):
    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "close help", id="help.close")]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 90%; height: 90%; border: round $accent; background: $surface; }
    """

    def __init__(self, markdown: str):
        super().__init__()
        self.markdown = markdown

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Markdown(self.markdown)
