"""Token edits on a sequence, and where they leave the KV cache.

A causal model's K/V at position j depend only on tokens <= j, so an edit at position m keeps the K/V of
every position < m in every layer and invalidates everything from m on (from layer 2 on, every later position
has read the changed token). The engine keeps [0, m), truncates from m (engine/core/edit_cuts.py), and
prefills the new suffix.
"""

from __future__ import annotations

from dataclasses import dataclass

KINDS = ("replace", "insert", "delete")


class EditError(ValueError):
    """An edit that does not fit the sequence; the message says what the valid range is."""


@dataclass(frozen=True)
class EditedSequence:
    # the new prompt
    prompt: list[int]
    # generated tokens kept as context (edit in the generated part) or [] (edit in the prompt)
    generated: list[int]
    # m: first position whose token changed
    position: int
    num_deleted: int
    inserted: list[int]

    @property
    def tokens(self) -> list[int]:
        return self.prompt + self.generated


def apply_edit(
    prompt: list[int],
    generated: list[int],
    position: int,
    token_ids: list[int] | int,
    kind: str,
    num_replaced: int | None = None,
) -> EditedSequence:
    """Apply one edit to prompt + generated.

    replace: tokens [m, m + len(token_ids)) become token_ids (with num_replaced: tokens [m, m + num_replaced),
    so a selection becomes text of any length in one edit). insert: token_ids go before position m.
    delete: `token_ids` tokens (a count, or a list whose length is the count) go from position m.
    In the prompt, generated tokens are dropped and generation restarts after the edited prompt. In the
    generated part, the edited sequence up to and including the edit becomes the context.
    """
    if kind not in KINDS:
        raise EditError(f"unknown edit kind {kind!r}; use one of {', '.join(KINDS)}")
    sequence = prompt + generated
    length = len(sequence)
    new = list(token_ids) if not isinstance(token_ids, int) else []
    if kind == "delete":
        count = token_ids if isinstance(token_ids, int) else max(1, len(new))
        new = []
        if count < 1 or not 0 <= position or position + count > length:
            raise EditError(
                f"cannot delete {count} token(s) at position {position}: the sequence has {length} "
                f"tokens (positions 0-{length - 1})"
            )
        deleted = count
    elif kind == "insert":
        if not new:
            raise EditError("insert needs at least one token")
        if not 0 <= position <= length:
            raise EditError(f"cannot insert at position {position}: valid positions are 0-{length}")
        deleted = 0
    else:
        if not new:
            raise EditError("replace needs at least one token")
        deleted = len(new) if num_replaced is None else num_replaced
        if deleted < 1 or not 0 <= position or position + deleted > length:
            raise EditError(
                f"cannot replace {deleted} token(s) at position {position}: the sequence has "
                f"{length} tokens (positions 0-{length - 1})"
            )
    edited = sequence[:position] + new + sequence[position + deleted :]
    if position < len(prompt) or not generated:
        # the prompt keeps everything before m and what was typed, even where the edit ran past its old end
        new_prompt_len = max(position + len(new), len(prompt) + len(new) - deleted)
        if new_prompt_len < 1:
            raise EditError("the edit would leave an empty prompt")
        return EditedSequence(edited[:new_prompt_len], [], position, deleted, new)
    context = edited[: position + len(new)]
    return EditedSequence(context[: len(prompt)], context[len(prompt) :], position, deleted, new)
