"""The live UI's `PromptBar` on its own: Enter in the prompt box posts one `PromptBar.Submitted` with the text
and the sampling boxes' values (parsed, their defaults when empty); a bad value is named and nothing is
posted."""

from __future__ import annotations

import pytest
from textual.app import App, ComposeResult

from kvtui.widgets.prompt_bar import PromptBar

pytestmark = pytest.mark.anyio


class BarApp(App):
    def __init__(self) -> None:
        super().__init__()
        self.submitted: list[PromptBar.Submitted] = []

    def compose(self) -> ComposeResult:
        yield PromptBar(max_tokens=32)

    def on_mount(self) -> None:
        self.query_one(PromptBar).focus_prompt()

    def on_prompt_bar_submitted(self, message: PromptBar.Submitted) -> None:
        self.submitted.append(message)


async def test_enter_posts_one_submitted_with_the_prompt_and_default_sampling():
    app = BarApp()
    async with app.run_test(size=(120, 5)) as pilot:
        await pilot.press(*"Why is the sky blue?", "enter")
        await pilot.pause()
        assert len(app.submitted) == 1
        sent = app.submitted[0]
        sampling = (sent.temperature, sent.seed, sent.max_tokens)
        assert sent.prompt == "Why is the sky blue?" and sampling == (0.0, None, 32)
        assert sent.control is app.query_one(PromptBar)
        # the bar leaves the box to the app (it clears it once the prompt went somewhere)
        assert app.query_one("#prompt").value == "Why is the sky blue?"


async def test_the_sampling_boxes_parse_and_enter_in_one_goes_back_to_the_prompt():
    app = BarApp()
    async with app.run_test(size=(120, 5)) as pilot:
        await pilot.click("#temperature")
        await pilot.press(*"0.7", "tab", *"11", "tab", *"128", "enter")
        assert app.focused.id == "prompt" and not app.submitted
        await pilot.press(*"hi", "enter")
        await pilot.pause()
        (sent,) = app.submitted
        assert (sent.prompt, sent.temperature, sent.seed, sent.max_tokens) == ("hi", 0.7, 11, 128)


BAD_VALUES = [
    ("max-tokens", "12.5", "max '12.5'"),
    ("max-tokens", "0", ">= 1"),
    ("seed", "x1", "seed 'x1'"),
    ("temperature", "-1", ">= 0"),
]


@pytest.mark.parametrize(
    "box, value, said",
    BAD_VALUES,
    ids=["max-not-whole", "max-zero", "seed-not-whole", "temperature-negative"],
)
async def test_a_bad_sampling_value_is_named_and_nothing_is_posted(box, value, said):
    app = BarApp()
    async with app.run_test(size=(120, 5)) as pilot:
        app.query_one(f"#{box}").value = value
        await pilot.press(*"hi", "enter")
        await pilot.pause()
        assert not app.submitted
        assert any(said in n.message for n in app._notifications)


async def test_an_empty_prompt_posts_nothing_and_a_stopped_bar_says_why():
    app = BarApp()
    async with app.run_test(size=(120, 5)) as pilot:
        await pilot.press(" ", "enter")
        await pilot.pause()
        assert not app.submitted
        bar = app.query_one(PromptBar)
        bar.chat = False
        assert bar.prompt.placeholder.startswith("plain text prompt")
        bar.stop("out of memory")
        assert bar.prompt.disabled and "out of memory" in bar.prompt.placeholder
