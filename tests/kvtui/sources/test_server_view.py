"""vLLM's KV-event batches as the server's steps in kvtui's block keys: a stored block gets the key of its token
chain from the root (the twin's own), a chain whose parent came before the stream is left out, a hash stored
twice stays resident until both copies are removed, and a hash no copy holds is forgotten."""

from __future__ import annotations

from engine.core.hashing import block_hashes
from kvtui.sources.server_view import ServerView, server_steps

TOKENS = list(range(1, 13))


def batch(ts, stored=(), removed=()):
    return {"ts": ts, "stored": list(stored), "removed": list(removed)}


def test_stored_blocks_get_the_twins_keys_and_runs():
    keys = block_hashes(TOKENS, 4)[0]
    steps = server_steps(
        [
            batch(2.0, [{"hashes": ["c"], "parent": "b", "tokens": TOKENS[8:]}]),
            batch(1.0, [{"hashes": ["a", "b"], "parent": None, "tokens": TOKENS[:8]}]),
        ],
        t0=0.5,
    )
    assert [s.t for s in steps] == [0.5, 1.5]
    assert steps[0].runs == [keys[:2]] and steps[1].stored == [keys[2]]


def test_a_chain_from_before_the_stream_is_left_out():
    view = ServerView()
    step = view.fold(batch(1.0, [{"hashes": ["x"], "parent": "unknown", "tokens": TOKENS[:4]}]), 0, 0.0)
    assert step.stored == [] and not view.resident


def test_two_copies_stay_until_both_go_and_a_gone_hash_is_forgotten():
    view = ServerView()
    block = {"hashes": ["a"], "parent": None, "tokens": TOKENS[:4]}
    view.fold(batch(1.0, [block]), 0, 0.0)
    view.fold(batch(2.0, [block]), 1, 0.0)
    (key,) = block_hashes(TOKENS[:4], 4)[0]
    assert view.resident[key] == 2
    view.fold(batch(3.0, removed=["a"]), 2, 0.0)
    assert view.resident[key] == 1
    step = view.fold(batch(4.0, removed=["a", "a"]), 3, 0.0)
    assert step.removed == [key] and key not in view.resident
    assert view._known == {} and not view._copies
