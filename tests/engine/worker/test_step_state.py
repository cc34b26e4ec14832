"""State kept between steps: device block tables (paged_kv.BlockTables), the cached req.tokens, batched argmax."""

import pytest
import torch

from engine.core.request import Request
from engine.core.scheduler import ScheduledChunk
from engine.engine import Engine, EngineConfig, SamplingParams
from engine.worker.paged_kv import BlockTables
from engine.worker.sampling import sample
from tests.helpers.decode_paths import DECODE_PATHS, paged_engine
from tests.helpers.tiny_models import random_prompts, tiny_model


def _request(table):
    return Request("r", [1, 2, 3], SamplingParams(), 0.0, block_table=list(table))


def test_block_table_tensor_follows_appends_copy_on_write_and_cuts():
    tables, req = BlockTables(torch.device("cpu")), _request([4, 5, 6])
    assert tables.get(req).tolist() == [4, 5, 6]
    first = tables.known["r"][1]
    # grows past the buffer: a bigger one, old entries kept
    req.block_table += [7] * 20
    assert tables.get(req).tolist() == [4, 5, 6] + [7] * 20
    # copy-on-write replaced an entry in place: made again
    req.block_table[1] = 9
    assert tables.get(req).tolist()[:3] == [4, 9, 6]
    # an edit cut it
    del req.block_table[2:]
    assert tables.get(req).tolist() == [4, 9]
    req.block_table[:] = [10, 11]
    req.block_table.append(12)
    assert tables.get(req).tolist() == [10, 11, 12]
    assert first is not tables.known["r"][1]


def test_unchanged_table_reuses_its_tensor_and_stale_requests_are_forgotten():
    tables, req = BlockTables(torch.device("cpu")), _request([1, 2])
    assert tables.get(req).data_ptr() == tables.get(req).data_ptr()
    for i in range(40):
        tables.get(Request(f"x{i}", [1], SamplingParams(), 0.0, block_table=[i]))
    tables.keep_only(["r"])
    assert set(tables.known) == {"r"}


def test_tokens_are_cached_until_a_list_is_replaced_or_grows():
    req = Request("r", [1, 2, 3], SamplingParams(), 0.0)
    tokens = req.tokens
    assert tokens == [1, 2, 3] and req.tokens is tokens
    req.output_token_ids.append(4)
    # a caller's old list never changes
    assert req.tokens == [1, 2, 3, 4] and tokens == [1, 2, 3]
    # an edit replaces both
    req.prompt_token_ids, req.output_token_ids = [9, 8], [7]
    assert req.tokens == [9, 8, 7]
    # same length, another list
    req.output_token_ids = [6]
    assert req.tokens == [9, 8, 6]
    assert [req.token_slice(a, b) for a, b in ((0, 1), (1, 3), (2, 3), (0, 3))] == [
        [9],
        [8, 6],
        [6],
        [9, 8, 6],
    ]


def test_the_runner_samples_each_complete_chunk_with_one_argmax_for_the_step():
    model = tiny_model("llama-gqa")
    engine = Engine.from_model(model, config=EngineConfig(block_size=4, num_blocks=64))
    reqs = [Request(f"r{i}", p, SamplingParams(), 0.0) for i, p in enumerate(random_prompts([5, 9, 3]))]
    for req in reqs:
        for logical in range(engine.cache.pool.blocks_for(req.num_tokens)):
            req.block_table.append(engine.cache.pool.allocate(req.request_id, logical))
    # the last chunk stops short of its prompt's end: nothing to sample there yet
    chunks = [ScheduledChunk(r, 0, r.num_tokens) for r in reqs[:2]] + [ScheduledChunk(reqs[2], 0, 2)]
    result = engine.runner.execute(chunks)
    rows = list(result.logits)
    assert result.greedy == [int(torch.argmax(row)) for row in rows]
    assert result.token_ids == [
        sample(rows[0], SamplingParams(), None),
        sample(rows[1], SamplingParams(), None),
        None,
    ]
    assert not hasattr(rows[0], "greedy")


@pytest.mark.parametrize("decode", DECODE_PATHS)
def test_decode_of_one_sequence_in_consecutive_blocks_stays_exact(decode):
    from tests.helpers.reference import no_cache_logits

    model = tiny_model("llama-gqa")
    engine = paged_engine(model, decode, block_size=4, num_blocks=64, prefix_cache=False)
    out = engine.generate(random_prompts([13]), SamplingParams(max_tokens=6, return_logits=True))[0]
    ref = no_cache_logits(model, out.prompt_token_ids + out.token_ids)
    assert (out.logits - ref[12:18]).abs().max().item() <= 1e-4
