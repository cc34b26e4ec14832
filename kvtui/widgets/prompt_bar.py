"""The live UI's prompt bar: the prompt box and its sampling boxes (temperature, seed, max tokens).

It owns its inputs, as Harlequin's `RunQueryBar` does: Enter in the prompt box parses the sampling boxes and
posts one `PromptBar.Submitted` (the text and the sampling values), or says what is wrong and posts nothing;
Enter in a sampling box does the same (with an empty prompt box it goes back to it). What the app does with a prompt (a chat message or plain
text, to which engine) is the app's business: it handles `on_prompt_bar_submitted`.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import Input, Label

# The sampling boxes: id -> (label, placeholder). Empty means the default: greedy, no seed, the app's
# --max-tokens (its placeholder).
SAMPLING_INPUTS = {"temperature": ("temp", "0"), "seed": ("seed", "none"), "max-tokens": ("max", "")}


class PromptBar(Horizontal):
    DEFAULT_CSS = """
    PromptBar { height: 3; }
    PromptBar #prompt { height: 3; width: 1fr; }
    PromptBar .sampling-label { width: auto; height: 3; padding: 1 0 0 1; color: $text-muted; }
    PromptBar .sampling { width: 10; height: 3; }
    """

    class Submitted(Message):
        """A prompt to send, with the sampling values the boxes hold (their defaults when empty)."""

        def __init__(
            self, bar: PromptBar, prompt: str, temperature: float, seed: int | None, max_tokens: int
        ) -> None:
            super().__init__()
            self.bar = bar
            self.prompt = prompt
            self.temperature = temperature
            self.seed = seed
            self.max_tokens = max_tokens

        @property
        def control(self) -> PromptBar:
            return self.bar

    # a chat message (through the model's chat template) or plain text: only the placeholder says which
    chat: reactive[bool] = reactive(True, init=False)

    def __init__(
        self, *, max_tokens: int = 64, chat: bool = True, id: str | None = None, classes: str | None = None
    ) -> None:
        super().__init__(id=id, classes=classes)
        self.max_tokens = max_tokens
        self.set_reactive(PromptBar.chat, chat)

    def compose(self) -> ComposeResult:
        yield Input(placeholder=self._placeholder(), id="prompt")
        for name, (label, placeholder) in SAMPLING_INPUTS.items():
            yield Label(label, classes="sampling-label")
            yield Input(placeholder=placeholder or str(self.max_tokens), id=name, classes="sampling")

    @property
    def prompt(self) -> Input:
        return self.query_one("#prompt", Input)

    def _placeholder(self) -> str:
        if self.chat:
            return "chat message (through the chat template), Enter to send (p: here; ctrl+t: plain text; Esc: leave)"
        return "plain text prompt, Enter to send (p: here; ctrl+t: chat message; Esc: leave)"

    def watch_chat(self) -> None:
        self.prompt.placeholder = self._placeholder()

    def focus_prompt(self) -> None:
        self.prompt.focus()

    def clear(self) -> None:
        """Empty the prompt box (the prompt was sent); the sampling boxes keep their values."""
        self.prompt.value = ""

    def stop(self, reason: str) -> None:
        """The engine stopped for good: the prompt box says why and takes no more prompts."""
        self.prompt.placeholder = f"the engine stopped: {reason} (quit and start kvtui again)"
        self.prompt.disabled = True

    def sampling(self) -> tuple[float, int | None, int] | None:
        """(temperature, seed, max tokens) from the boxes, or None after saying what is wrong."""
        values = {name: self.query_one(f"#{name}", Input).value.strip() for name in SAMPLING_INPUTS}
        try:
            temperature = float(values["temperature"] or 0)
            seed = int(values["seed"]) if values["seed"] else None
            max_tokens = int(values["max-tokens"]) if values["max-tokens"] else self.max_tokens
        except ValueError:
            self.notify(
                f"temperature is a number, seed and max tokens whole numbers (got temp "
                f"{values['temperature']!r}, seed {values['seed']!r}, max {values['max-tokens']!r})",
                severity="error",
                timeout=5,
            )
            return None
        if temperature < 0 or max_tokens < 1:
            self.notify(
                "temperature must be >= 0 (0 = greedy) and max tokens >= 1", severity="error", timeout=5
            )
            return None
        return temperature, seed, max_tokens

    def on_input_submitted(self, message: Input.Submitted) -> None:
        message.stop()
        text = self.prompt.value
        if not text.strip():
            # Enter in temperature / seed / max tokens with no prompt yet: back to the prompt
            if message.input.id != "prompt":
                self.focus_prompt()
            return
        # Enter in any box sends the prompt with the values the boxes hold
        sampling = self.sampling()
        if sampling is not None:
            temperature, seed, max_tokens = sampling
            self.post_message(self.Submitted(self, text, temperature, seed, max_tokens))
