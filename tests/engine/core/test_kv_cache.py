"""engine/core/kv_cache.py without a model: a manager and requests from token ids alone (vLLM's
tests/v1/core/test_prefix_caching.py style): exact block ids, ref counts, free-list order, eviction order, locks,
the copies recorded for the worker, and the null prefix cache."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from engine.core.blocks import BlockCopy
from engine.core.prefix_cache import NoPrefixCache
from engine.core.request import Request, SamplingParams, Status
from engine.core.scheduler import Scheduler
from tests.helpers.model_free import model_free_manager, run_model_free

BS = 4


def request(rid: str, tokens: list[int], max_tokens: int = 1, salt: str | None = None) -> Request:
    return Request(rid, list(tokens), SamplingParams(max_tokens=max_tokens), 0.0, salt)


def prefill(manager, req: Request) -> None:
    """Admission, room for the whole prompt, its K/V computed, its full blocks cached: one prefill step."""
    manager.admit(req)
    req.status = Status.RUNNING
    manager.allocate_slots(req, req.num_tokens - req.num_computed)
    req.num_computed = req.num_tokens
    manager.cache_blocks(req)


def test_blocks_are_allocated_in_free_list_order_and_come_back_last_block_first():
    manager = model_free_manager(10, BS)
    a = request("a", range(10))
    prefill(manager, a)
    assert a.block_table == [0, 1, 2] and manager.pool.ref_counts[:4] == [1, 1, 1, 0]
    assert list(manager.pool.free) == [3, 4, 5, 6, 7, 8, 9]
    manager.free(a)
    # the two whole blocks stay in the tree and the partly filled third one as a tail: nothing is freed
    assert manager.pool.ref_counts == [0] * 10 and list(manager.pool.free) == [3, 4, 5, 6, 7, 8, 9]
    assert manager.num_cached() == 3 and manager.num_available() == 10


def test_a_shared_prefix_is_shared_by_id_and_the_tail_is_copied_before_a_write():
    manager = model_free_manager(10, BS)
    a = request("a", range(10))
    prefill(manager, a)
    manager.free(a)
    b = request("b", [*range(10), 50, 51])
    manager.admit(b)
    # blocks 0 and 1 from the tree, and block 2 (the tail [8, 9]) for its first two tokens
    assert b.block_table == [0, 1, 2] and b.num_computed == 10 and b.num_cached == 10
    assert manager.pool.ref_counts[:4] == [1, 1, 1, 0]
    manager.allocate_slots(b, 2)
    # the write lands in the cached tail: copied into the first free block, the copy recorded for the worker;
    # the tail itself stays cached for the next request that continues it
    assert b.block_table == [0, 1, 3] and manager.pool.take_copies() == [BlockCopy(2, 3, 2)]
    assert manager.pool.ref_counts[:4] == [1, 1, 0, 1] and manager.prefix_cache.holds(2)


def test_eviction_takes_tails_first_then_least_recently_used_leaves():
    manager = model_free_manager(6, BS)
    for rid, first in (("a", 0), ("b", 100)):
        req = request(rid, range(first, first + 9))
        prefill(manager, req)
        manager.free(req)
    # a: blocks 0, 1 (tree) and tail 2; b: blocks 3, 4 and tail 5; nothing free any more
    assert list(manager.pool.free) == [] and manager.num_available() == 6
    evicted = manager.evict(6)
    assert evicted == [2, 5, 1, 0, 4, 3]
    assert list(manager.pool.free) == evicted


def test_a_locked_path_is_never_evicted_and_the_lock_goes_with_the_request():
    manager = model_free_manager(4, BS)
    a = request("a", range(9))
    prefill(manager, a)
    radix = manager.prefix_cache.radix
    assert a.lock_node is not None and a.lock_node.lock_ref == 1
    assert manager.evict(4) == [] and manager.num_available() == 1
    manager.free(a)
    assert a.lock_node is None and all(node.lock_ref == 0 for node in radix.nodes.values())
    assert sorted(manager.evict(4)) == [0, 1, 2]


def test_allocation_evicts_when_the_free_list_is_empty():
    manager = model_free_manager(3, BS)
    a = request("a", range(9))
    prefill(manager, a)
    manager.free(a)
    b = request("b", range(100, 105))
    prefill(manager, b)
    # the tail (block 2) went first, then the least recently used leaf block (1)
    assert b.block_table == [2, 1] and manager.prefix_cache.radix.evicted


def test_prefix_caching_off_is_a_null_cache_that_frees_everything():
    manager = model_free_manager(10, BS, prefix_cache=False)
    assert isinstance(manager.prefix_cache, NoPrefixCache)
    a = request("a", range(10))
    prefill(manager, a)
    manager.free(a)
    assert list(manager.pool.free) == [3, 4, 5, 6, 7, 8, 9, 2, 1, 0] and manager.num_cached() == 0
    b = request("b", range(10))
    manager.admit(b)
    assert b.num_computed == 0 and b.block_table == [] and manager.evict(3) == []


def test_forks_share_every_block_and_copy_the_partial_one_on_write():
    manager = model_free_manager(10, BS, prefix_cache=False)
    parent = request("p", range(6), max_tokens=4)
    prefill(manager, parent)
    child = request("p.1", range(6), max_tokens=4)
    child.num_computed = parent.num_computed
    manager.fork(parent, child)
    assert child.block_table == parent.block_table == [0, 1] and manager.pool.ref_counts[:2] == [2, 2]
    manager.allocate_slots(child, 1)
    assert child.block_table == [0, 2] and manager.pool.take_copies() == [BlockCopy(1, 2, 2)]


def test_the_scheduler_runs_a_workload_with_no_model():
    manager = model_free_manager(12, BS)
    scheduler = Scheduler(manager, manager.trace, max_batched_tokens=8, max_num_seqs=4)
    system = list(range(8))
    requests = {f"r{i}": request(f"r{i}", [*system, 20 + i, 30 + i], max_tokens=3) for i in range(4)}
    for req in requests.values():
        scheduler.add(req)
    finished = run_model_free(manager, scheduler, requests)
    assert sorted(finished) == sorted(requests)
    # the system prompt's two blocks were computed once, and shared by the later requests
    assert [requests[f"r{i}"].num_cached for i in range(4)] == [0, 8, 8, 8]
    assert manager.pool.ref_counts == [0] * 12


def test_the_manager_and_scheduler_run_where_torch_cannot_be_imported():
    root = Path(__file__).resolve().parents[3]
    code = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "transformers", "numpy"):
            raise ImportError(f"{name} is blocked in this test")
sys.meta_path.insert(0, Block())
from tests.helpers.model_free import model_free_manager, run_model_free
from engine.core.request import Request, SamplingParams
from engine.core.scheduler import Scheduler
manager = model_free_manager(16, 4, policy="lfu")
scheduler = Scheduler(manager, manager.trace, max_batched_tokens=6, max_num_seqs=3)
reqs = {f"r{i}": Request(f"r{i}", [1, 2, 3, 4, 5, i], SamplingParams(max_tokens=4), 0.0) for i in range(6)}
for r in reqs.values():
    scheduler.add(r)
print(len(run_model_free(manager, scheduler, reqs)), "torch" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["6", "False"]


def test_a_difference_inside_the_partial_block_is_a_divergence_against_a_cached_tail():
    manager = model_free_manager(10, BS)
    a = request("a", range(10))
    prefill(manager, a)
    manager.free(a)
    # whole blocks 0-7 match; the rest [50, 51] is shorter than a block and differs from the tail [8, 9] at once
    match = manager.probe([*range(8), 50, 51, 52], None)
    assert match.reason == "divergent" and match.num_tokens == 8
    assert {k: match.detail[k] for k in ("position", "expected_id", "actual_id")} == {
        "position": 8,
        "expected_id": 8,
        "actual_id": 50,
    }


def test_a_difference_inside_the_partial_block_is_a_divergence_against_a_tree_block():
    manager = model_free_manager(10, BS)
    a = request("a", range(13))
    prefill(manager, a)
    manager.free(a)
    # [8, 50] continues the tree block [8, 9, 10, 11] for one token: reused, then the first difference
    b = request("b", [*range(8), 8, 50, 99])
    manager.admit(b)
    match = manager.probe([*range(8), 8, 50, 99], None)
    assert match.reason == "divergent" and match.detail["position"] == 9 == b.num_computed
    assert (match.detail["expected_id"], match.detail["actual_id"]) == (9, 50)


def test_a_prompt_longer_than_a_cached_tail_stops_where_the_tail_ends():
    manager = model_free_manager(10, BS)
    a = request("a", range(6))
    prefill(manager, a)
    manager.free(a)
    # block 0 in the tree, the tail [4, 5] equal to the prompt, then nothing cached
    match = manager.probe([*range(8), 8, 9], None)
    assert match.reason == "cache_end" and match.detail["position"] == 6 == match.num_tokens
