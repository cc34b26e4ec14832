"""A `kvtui whatif -o` trace's made-up token ids read as labels: hash ids as #h, not the ids glued together."""

from __future__ import annotations

import json
import re

import pytest

from kvtui.app import KvtuiApp
from kvtui.whatif.labels import label, run_length, scan_run_length
from kvtui.whatif.requests import FRESH_BASE, HASH_BASE, hash_id_tokens
from kvtui.widgets.radix_tree import RadixTreeView
from tests.helpers.ui_fuzz import mooncake_whatif_trace

pytestmark = pytest.mark.anyio


async def test_replayed_tree_nodes_show_hash_ids(tmp_path):
    path = str(mooncake_whatif_trace(tmp_path))
    app = KvtuiApp(source=path, trace_path=path, open_interesting=True, frame_rate=None)
    async with app.run_test(size=(120, 40)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.press("3")
        await pilot.pause()
        tree = app.query_one("#radix", RadixTreeView)
        rows = [tree.render_line(y).text for y in range(1, 1 + len(tree.rows()))]
        # the shared prefix of the workload: hash ids 0, 1, 2, one label each, no made-up id digits
        assert re.search(r"#0 \s", rows[0]) and re.search(r"#1 \s", rows[1]), rows[:3]
        assert not any(re.search(r"\d{8}", row.split(" n")[0]) for row in rows), rows


def test_labels_and_the_run_length():
    b = 16
    prompt = hash_id_tokens([0, 1, 7], 40, b)
    assert [label(t, b) for t in prompt[:2]] == ["#0 ", ""]
    assert "".join(label(t, b) for t in prompt) == "#0 #1 #7 "
    assert label(FRESH_BASE + 5, b) == "·" and label(42, b) == "42 "
    # the trace's block size when it divides the run starts, else their greatest common divisor
    assert run_length({"block_size": 16}, [prompt, hash_id_tokens([4, 9], 20, b)]) == 16
    assert run_length({"block_size": 32}, [prompt, hash_id_tokens([3], 5, b)]) == 16
    assert run_length({"block_size": 16}, [[HASH_BASE, HASH_BASE + 1]]) == 16


def test_a_broken_arrival_line_is_left_to_the_loader(tmp_path):
    path = tmp_path / "sim.jsonl"
    good = {"type": "request_arrived", "prompt_token_ids": hash_id_tokens([3, 5], 20, 16)}
    path.write_text('{"type": "header"}\n{"type": "request_arrived", "prompt_tok\n' + json.dumps(good) + "\n")
    assert scan_run_length(str(path), {"block_size": 16}) == 16
