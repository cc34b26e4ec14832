"""Command palette provider: every key binding of the app is also a command (bindings are the registry)."""

from __future__ import annotations

from textual.binding import Binding
from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.keys import format_key


def key_display(binding: Binding) -> str:
    """The keys as a user types them (`?`, `ctrl+home / G`), not Textual's names (`question_mark`)."""
    return " / ".join(format_key(key.strip()) for key in binding.key.split(","))


def own_bindings(cls: type) -> list[Binding]:
    """The bindings kvtui's own classes give `cls` (its own and its kvtui base classes'), without Textual's
    built-in scrolling keys."""
    out: list[Binding] = []
    for klass in cls.__mro__:
        if klass.__module__.startswith("kvtui."):
            out += klass.__dict__.get("BINDINGS", [])
    return out


def command_text(binding: Binding) -> str:
    return f"{binding.description} ({key_display(binding)})"


class KvtuiCommands(Provider):
    def _entries(self):
        return self.app.command_entries()

    async def discover(self) -> Hits:
        for binding, run in self._entries():
            yield DiscoveryHit(command_text(binding), run)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for binding, run in self._entries():
            text = command_text(binding)
            score = matcher.match(text)
            if score > 0:
                yield Hit(score, matcher.highlight(text), run)
