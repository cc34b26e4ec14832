"""The prompts `kvtui proxy` has forwarded whose answers have not ended: what its prediction adds to the
attached view.

vLLM caches a request's blocks when it schedules it, and publishes them (KV events) only after the step that
computes them, so a request that arrives while another with the same head is in flight is served that head,
though no event has said so yet. At each arrival the proxy predicts the larger of what the published blocks
serve and what the in-flight prompts' whole blocks serve (the longest prefix shared with one of them, under
the same salt, cut at the prompt's last whole block before its last token, as vLLM serves it).
"""

from __future__ import annotations


def _common(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class InFlight:
    def __init__(self):
        # request id -> (prompt token ids, cache salt)
        self.prompts: dict[str, tuple[list[int], str | None]] = {}

    def add(self, request_id: str, ids: list[int], salt: str | None) -> None:
        self.prompts[request_id] = (ids, salt)

    def remove(self, request_id: str) -> None:
        self.prompts.pop(request_id, None)

    def served(self, ids: list[int], salt: str | None, block_size: int) -> int:
        """Tokens of `ids` that the in-flight prompts' whole blocks would serve."""
        if not block_size or not ids:
            return 0
        bound = (len(ids) - 1) // block_size * block_size
        best = 0
        for other, other_salt in self.prompts.values():
            if other_salt != salt:
                continue
            # vLLM caches the other prompt's whole blocks only
            shared = min(_common(ids, other), len(other) // block_size * block_size)
            best = max(best, shared // block_size * block_size)
        return min(best, bound)
