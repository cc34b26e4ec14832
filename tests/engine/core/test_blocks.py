import pytest

from engine.core.blocks import BlockCopy, BlockPool, OutOfBlocks, tail_waste
from engine.engine import Engine, EngineConfig
from engine.models.loading import describe
from engine.trace import TraceSink
from tests.helpers.tiny_models import tiny_model


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
    # the manager decides: cached or freed
    assert pool.release(a, "r1", 0) == 0 and a not in pool.free
    pool.free_block(a)
    assert pool.ref_counts[a] == 0 and a in pool.free
    assert [e["type"] for e in events] == [
        "block_allocated",
        "block_shared",
        "block_released",
        "block_released",
        "block_freed",
    ]


def test_out_of_blocks_is_an_error_not_a_silent_reuse():
    pool, _ = make_pool(n=2)
    pool.allocate("r0", 0)
    pool.allocate("r0", 1)
    with pytest.raises(OutOfBlocks):
        pool.allocate("r1", 0)


def test_a_copy_is_an_event_and_data_for_the_worker():
    pool, events = make_pool()
    src, dst = pool.allocate("r0", 0), pool.allocate("r1", 0)
    pool.copy(src, dst, "r1", 0, 5)
    assert pool.take_copies() == [BlockCopy(src, dst, 5)] and pool.take_copies() == []
    assert events[-1] == {**events[-1], "type": "block_copied", "src": src, "dst": dst, "num_tokens": 5}


def test_tail_waste_is_the_unused_part_of_the_last_block():
    # the seeds' example: 35 tokens in 3 blocks of 16
    assert tail_waste([7, 8, 9], 35, 16) == 13


@pytest.mark.parametrize("arch", ["llama-mha", "llama-gqa", "llama-mqa", "qwen3-gqa"])
def test_pool_bytes_follow_the_kv_head_formula(arch):
    model = tiny_model(arch)
    engine = Engine.from_model(model, config=EngineConfig(block_size=8, num_blocks=10))
    shape = describe(model)
    expected = 2 * shape.layers * shape.kv_heads * shape.head_dim * shape.elem_bytes * 8 * 10
    assert engine.kv.nbytes == expected == shape.kv_bytes_per_block(8) * 10
    # never num_attention_heads
    assert shape.kv_heads == model.config.num_key_value_heads


def test_memory_budget_sizes_the_pool():
    model = tiny_model("llama-gqa")
    shape = describe(model)
    config = EngineConfig(block_size=16, kv_memory_mb=1)
    assert config.pool_blocks(shape) == (2**20) // shape.kv_bytes_per_block(16)
    assert Engine.from_model(model, config=config).kv.nbytes <= 2**20
