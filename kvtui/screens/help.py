"""`?`: what each view shows, the concepts behind it (from the seed notes), and every key."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown

from kvtui.widgets.palette import ROLES


def edit_colours() -> str:
    """The edit marks in words that hold in every theme, read from the palette's roles (not colour names)."""

    def colour(role: str) -> str:
        return ROLES[role].background.lstrip("$").replace("-", " ")

    return (
        f"kept on the theme's {colour('kept')} colour, dropped on its {colour('dropped')} colour, copied on its "
        f"{colour('copied')} colour (the edit line above the grid shows the three)"
    )


CONCEPTS = """\
# kvtui help

kvtui draws a **trace**: every fact the engine reports about its KV cache. Live mode runs a model and
shows its trace as it happens; replay reads a saved trace. The *cursor* is a point in the trace: every view
shows the cache exactly as it was after that event.

## Views (keys 1-6)
1. **Pool** - every physical block is one cell: `■` in use, a digit = shared by that many requests
   (ref count), `□` cached (no owner, kept in the prefix tree, evictable), `·` free, `▶` being written this
   step. `o` colors blocks by owner. After an edit: {EDIT_COLOURS}. Arrows move the
   block cursor; the side panel shows its tokens, ref count, hash, owners, age, and the selected request's
   **block table** (logical -> physical, fill of each block, tail waste in the last block).
2. **Requests** - one lane per request over trace time: `·` queued, `█` prefill chunk, `▪` decode step,
   `─` running, `E` edit, `P` preempted, `┃` finished. Above: TTFT / TPOT / ITL percentiles.
3. **Prefix tree** - the radix tree, one row per node: its token run, its blocks, hits, lock refs (running
   requests using it), last access. Fresh marks: insert, hit, split; recent evictions below. Under it the
   **miss explainer** for the selected request: how many prompt tokens came from the cache and why matching
   stopped (divergent token, block floor, evicted, salt, short prompt, ...).
4. **Metrics** - hit rates and KV memory over time; formula bytes next to pool bytes.
5. **Rings** - sliding-window layers: W slots per request, the write head `▼`, the position in each slot, in
   its role (legend: sink kept forever, recent in the window, heavy hitter kept for its attention in a
   `kvtui sinks --trace` trace); under them, where in the sequence the held positions lie.
6. **Tokens** - the selected request's tokens with boundaries and positions; move the cursor (shift+arrows
   select a range) and `r` replace the selection by typed text of any length, `i` insert before, `d` delete
   the selection (live mode), `f` fork. An edit goes to the engine's present: scrubbed back, the view jumps
   to live first, and the engine refuses an edit whose token it no longer has there.

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
`p` the prompt box (Enter sends) · `h` holds the engine between two steps, so that the pool, the tree and the
tokens stay as they are while you look (a short request otherwise finishes in about two seconds, before
sharing or copy-on-write can be seen); `n` then runs one step; `h` again resumes · `F` follows the end again
after scrubbing back · `r` `i` `d` edit, `f` fork, `s` stop the selected request.

## The scrubber (bottom)
The bar is the whole trace, `●` the cursor; click it to seek. The row above marks where things happen:
`A` a request arrives, `E` an edit, `x` a block evicted, `m` a prompt missed the cache (part of it computed),
`P` a request preempted. Where several share a column the first in P E x m A shows. `a` `e` `x` `m` jump to
the next one of a kind, shift (`A` `E` `X` `M`) to the previous.

## Replay controls
`space` play/pause · `.` / `,` one event forward/back · `>` / `<` one engine step forward/back ·
`+` / `-` speed (a stretch with no event plays as one second of trace time) · `g` go to a percentage or
`#event` · `ctrl+home` / `ctrl+end` (or `G`) start/end · `a` `e` `x` `m` next arrival / edit / eviction /
miss, shift for previous · `[` `]` previous/next request · `ctrl+p` command palette (every key is there) ·
`q` quit.
"""


class HelpScreen(ModalScreen):
    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "close help", id="help.close")]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 90%; height: 90%; border: round $accent; background: $surface; }
    """

    def __init__(self, keys_markdown: str = ""):
        super().__init__()
        self.keys_markdown = keys_markdown

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            concepts = CONCEPTS.replace("{EDIT_COLOURS}", edit_colours())
            yield Markdown(concepts + "\n## All keys\n" + self.keys_markdown)
