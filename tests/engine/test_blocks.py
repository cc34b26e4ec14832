import pytest
import torch
from tiny_models import tiny_model

from engine.core.blocks import BlockPool, OutOfBlocks, tail_waste
from engine.engine import Engine, EngineConfig
from engine.models.loading import describe
from engine.trace import TraceSink


def make_pool(n=4, size=16):
    events = []
    sink = TraceSink()
    sink.listeners.append(events.append)
    return BlockPool(n, size, sink), events


def test_allocate_share_release_free_round_trip():
    pool, events = make_pool()
    a = pool.allocate("r0", 0)
    pool.share(a, "r1", 0)
    assert pool.ref_counts[a] == 2 and pool.num_free() == 3
    pool.release(a, "r0", 0)
    assert pool.ref_counts[a] == 1 and a not in pool.free
    pool.release(a, "r1", 0)
    assert pool.ref_counts[a] == 0 and a in pool.free
    assert [e["type"] for e in events] == ["block_allocated", "block_shared", "block_released", "block_released",
                                          "block_freed"]


def test_out_of_blocks_is_an_error_not_a_silent_reuse():
    pool, _ = make_pool(n=2)
    pool.allocate("r0", 0)
    pool.allocate("r0", 1)
    with pytest.raises(OutOfBlocks):
        pool.allocate("r1", 0)


def test_copy_on_write_copies_only_shared_blocks():
    pool, events = make_pool()
    copies = []
    pool.on_copy = lambda src, dst, n: copies.append((src, dst, n))
    table = [pool.allocate("r0", 0)]
    assert pool.copy_on_write(table, 0, "r0", 5) == table[0] and not copies  # sole owner writes in place
    other = list(table)
    pool.share(other[0], "r1", 0)
    new = pool.copy_on_write(other, 0, "r1", 5)
    assert new != table[0] and other == [new] and copies == [(table[0], new, 5)]
    assert pool.ref_counts[table[0]] == 1 and pool.ref_counts[new] == 1
    assert "block_copied" in [e["type"] for e in events]


def test_release_table_releases_tail_first_and_truncates():
    pool, events = make_pool()
    table = [pool.allocate("r0", i) for i in range(3)]
    pool.release_table(table, "r0", start_logical=1)
    assert len(table) == 1 and pool.num_free() == 3
    released = [e["logical"] for e in events if e["type"] == "block_released"]
    assert released == [2, 1]


def test_tail_waste_is_the_unused_part_of_the_last_block():
    assert tail_waste([7, 8, 9], 35, 16) == 13  # the seeds' example: 35 tokens in 3 blocks of 16


@pytest.mark.parametrize("arch", ["llama-mha", "llama-gqa", "llama-mqa", "qwen3-gqa"])
def test_pool_bytes_follow_the_kv_head_formula(arch):
    model = tiny_model(arch)
    engine = Engine.from_model(model, config=EngineConfig(block_size=8, num_blocks=10))
    shape = describe(model)
    expected = 2 * shape.layers * shape.kv_heads * shape.head_dim * shape.elem_bytes * 8 * 10
    assert engine.cache.kv.nbytes == expected == shape.kv_bytes_per_block(8) * 10
    assert shape.kv_heads == model.config.num_key_value_heads  # never num_attention_heads


def test_memory_budget_sizes_the_pool():
    model = tiny_model("llama-gqa")
    shape = describe(model)
    config = EngineConfig(block_size=16, kv_memory_mb=1)
    assert config.pool_blocks(shape) == (2**20) // shape.kv_bytes_per_block(16)
    assert Engine.from_model(model, config=config).cache.kv.nbytes <= 2**20
