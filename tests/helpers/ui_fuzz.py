"""A UI fuzzer: the real apps, headless, driven by seeded random key sequences (tests/kvtui/test_ui_fuzz.py).

A *target* builds one app (a replay of a fixture trace, an attach trace, a what-if trace, live on a tiny random
model) and says when it is ready for keys. A *session* presses random keys into it until its budget is spent or
a key quits it (`q`, `ctrl+q`: counted, and the next session starts a fresh app). The keys come from every
binding of the app, its screens and every widget class it shows, plus arrows, tab, enter, escape, digits and a
few letters to type. An exception anywhere, or the app exiting without a quit key, is a failure that names the
target, the size, the session's seed and its keys. Time is a fake clock advanced 0.1 s per key, and every key
is followed by one frame (`tick`), so a replay session is the same run for the same seed.
"""

from __future__ import annotations

import asyncio
import random
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from textual.app import App
from textual.binding import Binding

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "fixtures" / "traces"
ATTACH = ROOT / "fixtures" / "attach"

GENERIC_KEYS = [
    *"0123456789",
    *"abz Z?[]<>.,+-",
    "up",
    "down",
    "left",
    "right",
    "shift+left",
    "shift+right",
    "home",
    "end",
    "pageup",
    "pagedown",
    "tab",
    "shift+tab",
    "enter",
    "escape",
    "backspace",
    "space",
    "ctrl+home",
    "ctrl+end",
]
# end the app: a quit, not a crash; rare, so that sessions are long
QUIT_KEYS = {"q", "ctrl+q"}
QUIT_WEIGHT = 0.1
# the command palette runs any command, "save screenshot" (a file in the working directory) included, and the
# terminal's suspend: neither belongs in a headless run
EXCLUDED_ACTIONS = {"command_palette", "screenshot", "suspend_process"}
EXCLUDED_KEYS = {"ctrl+p", "ctrl+z"}
SECONDS_PER_KEY = 0.1
# the share of keys drawn from the focused widget's and the screen's own bindings
LOCAL_SHARE = 0.5


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Target:
    name: str
    # (clock) -> a new app
    make: Callable[[FakeClock], App]
    # screen classes the app can push (their keys join the pool)
    screens: tuple[type, ...] = ()
    # seconds to wait for the app to have something to show
    ready_timeout: float = 30.0
    # keys drawn more often than the others (live: open the prompt box and send, hold and step)
    boost: dict[str, float] = field(default_factory=dict)


@dataclass
class FuzzResult:
    presses: int = 0
    sessions: int = 0
    quits: int = 0
    failures: list[str] = field(default_factory=list)


def binding_keys(classes) -> set[str]:
    """Every key bound by these classes or their bases (a "plus,equals_sign" binding gives both keys)."""
    keys: set[str] = set()
    for cls in classes:
        for klass in getattr(cls, "__mro__", ()):
            for binding in Binding.make_bindings(klass.__dict__.get("BINDINGS", ())):
                if binding.action.split("(")[0] not in EXCLUDED_ACTIONS:
                    keys.add(binding.key)
    return keys - EXCLUDED_KEYS


def key_pool(app: App, screens: tuple[type, ...]) -> list[str]:
    """The keys to draw from: the generic ones and every binding the app, its screens and its widgets have."""
    classes = {type(app), *screens, *(type(node) for node in app.screen.walk_children(with_self=True))}
    return sorted(binding_keys(classes) | set(GENERIC_KEYS))


def _choose(rng: random.Random, pool: list[str], app: App, boost: dict[str, float]) -> str:
    """A key from the pool, or (half the time) one the focused widget binds: a view's own keys get exercised
    in the state the previous keys left, not only right after a tab switch."""
    if rng.random() < LOCAL_SHARE and app.focused is not None:
        local = sorted(binding_keys([type(app.focused), type(app.screen)]) & set(pool))
        if local:
            pool = local
    weights = [QUIT_WEIGHT if key in QUIT_KEYS else boost.get(key, 1.0) for key in pool]
    return rng.choices(pool, weights)[0]


async def _wait_ready(app: App, pilot, timeout: float) -> None:
    """Until the app has its trace (a replay's loader, a live engine's header): keys before that test little."""
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        tick = getattr(app, "tick", None)
        if tick is not None:
            tick()
        if getattr(app, "timeline", True) is not None and getattr(app, "loading", None) is None:
            return
        await pilot.pause(0.05)
    raise TimeoutError(f"{type(app).__name__} had nothing to show after {timeout:.0f} s")


def session_seed(base: int, target: str, size: tuple[int, int], index: int) -> int:
    return random.Random(f"{base}/{target}/{size[0]}x{size[1]}/{index}").getrandbits(32)


async def run_session(
    target: Target, size: tuple[int, int], seed: int, budget: int
) -> tuple[int, bool, str | None]:
    """Press up to `budget` keys into a fresh app: (keys pressed, whether a key quit it, failure or None)."""
    rng = random.Random(seed)
    clock = FakeClock()
    app = target.make(clock)
    quits: list[str] = []
    keys: list[str] = []
    quit_action = app.action_quit

    async def action_quit() -> None:
        quits.append(keys[-1] if keys else "?")
        await quit_action()

    # a quit key reaches the app's own action_quit through the binding: counted here
    app.action_quit = action_quit
    failure: str | None = None
    try:
        async with app.run_test(size=size) as pilot:
            await _wait_ready(app, pilot, target.ready_timeout)
            pool = key_pool(app, target.screens)
            while len(keys) < budget and not quits:
                keys.append(_choose(rng, pool, app, target.boost))
                await pilot.press(keys[-1])
                if quits or app._exception is not None:
                    break
                if not app.is_running:
                    failure = "the app exited without a quit key"
                    break
                clock.now += SECONDS_PER_KEY
                tick = getattr(app, "tick", None)
                if tick is not None:
                    tick()
    except Exception:  # noqa: BLE001 (every exception is the finding, reported with its keys)
        failure = traceback.format_exc(limit=-8)
    finally:
        # a live engine's thread ends with its session, whatever happened
        stop = getattr(getattr(app, "controller", None), "stop", None)
        if stop is not None:
            stop()
    if failure is None and app._exception is not None:
        failure = "".join(traceback.format_exception(app._exception, limit=-8))
    if failure is not None:
        failure = (
            f"{target.name} at {size[0]}x{size[1]}, seed {seed}, after {len(keys)} keys: {keys!r}\n{failure}"
        )
    return len(keys), bool(quits), failure


async def fuzz(target: Target, size: tuple[int, int], presses: int, base_seed: int = 0) -> FuzzResult:
    """Sessions until `presses` keys were pressed; a quit starts a fresh session, a failure ends the run."""
    result = FuzzResult()
    while result.presses < presses:
        seed = session_seed(base_seed, target.name, size, result.sessions)
        pressed, quit, failure = await run_session(target, size, seed, presses - result.presses)
        result.presses += pressed
        result.sessions += 1
        result.quits += quit
        if failure is not None:
            result.failures.append(failure)
            break
    return result


# --- the targets ----------------------------------------------------------------------------------------------
def replay_target(path: Path) -> Target:
    """`kvtui replay PATH` as the command opens it: loaded in its worker, at the interesting point."""
    from kvtui.app import KvtuiApp
    from kvtui.screens.help import HelpScreen
    from kvtui.screens.panel import PanelScreen

    def make(clock: FakeClock) -> App:
        return KvtuiApp(
            source=str(path), trace_path=str(path), open_interesting=True, clock=clock, frame_rate=None
        )

    return Target(path.name, make, screens=(HelpScreen, PanelScreen))


def attach_target(path: Path) -> Target:
    """`kvtui replay` of an attach trace: the fleet app, folded at start."""
    from kvtui.app.fleet_app import FleetApp
    from kvtui.app.loader import load_trace

    loaded = load_trace(str(path))

    def make(_clock: FakeClock) -> App:
        return FleetApp(source=str(path), header=loaded.header, events=loaded.events, frame_rate=None)

    return Target(path.name, make)


def mooncake_whatif_trace(directory: Path) -> Path:
    """`kvtui whatif -o` of a small Mooncake workload (hash ids, shared prefixes): its simulated trace."""
    from click.testing import CliRunner

    from kvtui.cli import main

    rng = random.Random(3)
    workload = directory / "mooncake.jsonl"
    lines = []
    for i in range(24):
        shared = [0, 1, 2][: rng.randint(0, 3)]
        own = [100 + 4 * i + k for k in range(rng.randint(1, 3))]
        ids = shared + own
        lines.append(
            f'{{"timestamp": {i * 400}, "input_length": {16 * len(ids) - rng.randint(0, 8)}, '
            f'"output_length": {rng.randint(2, 6)}, "hash_ids": {ids}}}'
        )
    workload.write_text("\n".join(lines) + "\n")
    out = directory / "mooncake_sim.jsonl"
    args = ["whatif", str(workload), "--trace-block-size", "16", "--capacity", "384,1k", "-o", str(out), "-q"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    return out


def char_tokenizer():
    """A tokenizer of one token per printable ASCII character (97 ids with <unk> and <pad>: the tiny models'
    vocabulary), so that live prompts and edits can be typed as text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<pad>": 1, **{chr(c): c - 30 for c in range(32, 127)}}
    inner = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    inner.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    inner.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=inner, unk_token="<unk>", pad_token="<pad>")


def live_target() -> Target:
    """`kvtui live` on a tiny random model with a character tokenizer, a small pool (evictions come soon) and a
    host tier below it (evicted blocks go there and come back)."""
    from engine.engine import Engine, EngineConfig
    from kvtui.app import KvtuiApp
    from kvtui.app.feed import EngineWorker, EventFeed
    from kvtui.screens.help import HelpScreen
    from kvtui.screens.panel import PanelScreen
    from tests.helpers.tiny_models import tiny_model

    tokenizer = char_tokenizer()

    def engine():
        config = EngineConfig(device="cpu", block_size=4, num_blocks=48, max_batched_tokens=64, host_blocks=8)
        return Engine.from_model(tiny_model("llama-gqa"), tokenizer=tokenizer, config=config)

    def make(clock: FakeClock) -> App:
        feed = EventFeed()
        worker = EngineWorker(feed, "tiny", None, engine_factory=engine)
        app = KvtuiApp(
            source="tiny",
            live=True,
            feed=feed,
            controller=worker,
            clock=clock,
            frame_rate=None,
            max_tokens=12,
        )
        worker.start()
        return app

    # without a nudge a random walk seldom opens the prompt box and sends before leaving it: no request runs
    boost = {"p": 10.0, "enter": 6.0, "h": 2.0, "n": 3.0}
    return Target("live-tiny", make, screens=(HelpScreen, PanelScreen), ready_timeout=60.0, boost=boost)
