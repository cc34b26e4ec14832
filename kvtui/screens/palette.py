"""Command palette provider: every key binding of the app is also a command (bindings are the registry)."""

from __future__ import annotations

from textual.command import DiscoveryHit, Hit, Hits, Provider


class KvtuiCommands(Provider):
    def _entries(self):
        return self.app.command_entries()

    async def discover(self) -> Hits:
        for binding, run in self._entries():
            yield DiscoveryHit(f"{binding.description} ({binding.key})", run, help=binding.id)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for binding, run in self._entries():
            text = f"{binding.description} ({binding.key})"
            score = matcher.match(text)
            if score > 0:
                yield Hit(score, matcher.highlight(text), run, help=binding.id)
