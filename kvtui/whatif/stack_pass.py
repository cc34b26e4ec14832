"""The one pass of curve.py over compact arrays, a batch of requests at a time: every block's stack position
when its request arrives, into a histogram.

    builder = CurveBuilder(block_tokens=512)
    builder.add_batch(nodes, starts, may_hit)     # prefix-tree node ids (block_table.py), flat over requests
    builder.curve()

For each block, the request that last referenced it (`last`, 4 bytes a node) comes from a sort of the batch by
node: the previous reference in the batch, else the one before the batch. A request's seen blocks are its
leading ones (a block's prefix is referenced whenever the block is), and they fall into runs that share their
last request. What is sequential is one Fenwick query and update per run over request slots (curve.py's
method), in C where a compiler is at hand (stack_kernel.py), else in plain Python; everything per block is a
numpy operation over the whole batch. Memory: `last` and the histogram, 12 bytes a distinct block, and the
tree, 8 bytes a request.

`stack_weights` (sampled.py): each block stands for this many blocks in the stack, in fixed point with `shift`
fraction bits (a sampled block for 1 / rate blocks, a block kept whole for 1); a position is then one more
than the weight of the blocks above it, with the fraction cut off, and `index_of` maps it to its place in the
histogram (curve_figures.sampled_index).
"""

from __future__ import annotations

import ctypes
from array import array

import numpy as np

from kvtui.whatif.curve_figures import Curve
from kvtui.whatif.stack_kernel import stack_runs

__all__ = ["CurveBuilder"]


class CurveBuilder:
    """`add_batch` in arrival order, then `curve()`. `groups`: histograms kept apart by a per-block group
    (sampled.py's error estimate); `weighted`: token weights per block instead of `block_tokens` each."""

    def __init__(
        self,
        measure_from: int = 0,
        block_tokens: int = 1,
        weighted: bool = False,
        groups: int = 1,
        shift: int = 0,
        index_of=None,
    ):
        self.measure_from, self.block_tokens, self.weighted, self.groups = (
            measure_from,
            block_tokens,
            weighted,
            groups,
        )
        self.shift = shift
        # a position's place in the histogram (sampled: one place for many positions); None: itself
        self.index_of = index_of if index_of is not None else (lambda position: position)
        self.last = np.zeros(1024, dtype=np.int32)
        # Fenwick tree over slots 1..len(tree)-1 (a power of two): blocks whose last reference is there
        self.tree = array("q", bytes(8 * 1025))
        # hist[g, p]: counted blocks of group g whose stack position is p (p = 1: the most recent block)
        self.hist = np.zeros((groups, 1026), dtype=np.int64)
        self.hist_tokens = np.zeros(1026, dtype=np.int64) if weighted else None
        self.live = self.requests = self.total_blocks = self.total_tokens = self.warm_blocks = 0
        # counted blocks that may hit, per group (a sampled curve scales by them)
        self.counted = np.zeros(groups, dtype=np.int64)

    def _grow_tree(self) -> None:
        size = len(self.tree) - 1
        self.tree.frombytes(bytes(8 * size))
        # the new top node covers every slot so far; the others cover only empty slots
        self.tree[2 * size] = self.live

    def _grow(self, nodes_needed: int, positions_needed: int) -> None:
        if nodes_needed > len(self.last):
            grown = np.zeros(max(nodes_needed, 2 * len(self.last)), dtype=np.int32)
            grown[: len(self.last)] = self.last
            self.last = grown
        width = self.hist.shape[1]
        if positions_needed > width:
            size = max(positions_needed, 2 * width)
            grown = np.zeros((self.groups, size), dtype=np.int64)
            grown[:, :width] = self.hist
            self.hist = grown
            if self.hist_tokens is not None:
                tokens = np.zeros(size, dtype=np.int64)
                tokens[:width] = self.hist_tokens
                self.hist_tokens = tokens

    def add_batch(self, nodes, starts, may_hit, weights=None, group=None, stack_weights=None) -> None:
        """Requests in arrival order: request i's nodes are nodes[starts[i]:starts[i + 1]]; may_hit[j]: block
        j is within its request's hit limit; weights[j]: its tokens (weighted only); group[j]: its group;
        stack_weights[j]: the blocks it stands for in the stack (fixed point, `shift`; default 1 each)."""
        nodes = np.asarray(nodes, dtype=np.int64)
        starts = np.asarray(starts, dtype=np.int64)
        total, count_of = len(nodes), np.diff(starts)
        first_index = self.requests
        requests = len(count_of)
        self._grow(int(nodes.max()) + 1 if total else 0, 0)
        request_of = np.repeat(np.arange(requests, dtype=np.int64), count_of)
        slot_of = request_of + (first_index + 1)
        depth = np.arange(total, dtype=np.int64) - starts[request_of]
        # the slot that last referenced each block: in the batch, else before it (0 = never)
        order = np.argsort(nodes, kind="stable")
        sorted_nodes = nodes[order]
        repeat = np.zeros(total, dtype=bool)
        repeat[1:] = sorted_nodes[1:] == sorted_nodes[:-1]
        previous_sorted = self.last[sorted_nodes].astype(np.int64)
        previous_sorted[1:][repeat[1:]] = slot_of[order[:-1]][repeat[1:]]
        previous = np.empty(total, dtype=np.int64)
        previous[order] = previous_sorted
        final = np.ones(total, dtype=bool)
        final[:-1] = ~repeat[1:]
        self.last[sorted_nodes[final]] = slot_of[order[final]]
        seen = previous > 0
        seen_count = np.bincount(request_of[seen], minlength=requests)
        # runs: seen blocks in a row of one request that share their last slot
        run_start = seen.copy()
        run_start[1:] &= (depth[1:] == 0) | (previous[1:] != previous[:-1])
        run_at = np.flatnonzero(run_start)
        run_request = request_of[run_at]
        seen_end = starts[:-1] + seen_count
        run_end = np.minimum(np.append(run_at[1:], total), seen_end[run_request])
        run_length = run_end - run_at
        run_pointer = np.searchsorted(run_request, np.arange(requests + 1))
        seen_at = np.flatnonzero(seen)
        if stack_weights is None:
            distance = self._fenwick(
                previous[run_at], run_length, run_pointer, count_of, seen_count, first_index
            )
            # stack position of every seen block: its run's distance, then one more per block down the run
            position = np.repeat(distance - depth[run_at], run_length) + depth[seen_at] + 1
        else:
            # the same in weights: a run's, a request's and its seen blocks' from one running sum
            running = np.concatenate([[0], np.cumsum(np.asarray(stack_weights, dtype=np.int64))])
            run_weight = running[run_end] - running[run_at]
            request_weight = running[starts[1:]] - running[starts[:-1]]
            seen_weight = running[seen_end] - running[starts[:-1]]
            distance = self._fenwick(
                previous[run_at], run_weight, run_pointer, request_weight, seen_weight, first_index
            )
            above = np.repeat(distance - running[run_at], run_length) + running[seen_at]
            position = self.index_of((above >> self.shift) + 1)
        counted_request = np.arange(first_index, first_index + requests) >= self.measure_from
        if counted_request.any():
            blocks = count_of[counted_request]
            self.total_blocks += int(blocks.sum())
            counted_block = counted_request[request_of]
            if self.weighted:
                self.total_tokens += int(np.asarray(weights)[counted_block].sum())
            else:
                self.total_tokens += int(blocks.sum()) * self.block_tokens
            hit_able = counted_block & np.asarray(may_hit, dtype=bool)
            groups = np.zeros(total, dtype=np.int64) if group is None else np.asarray(group, dtype=np.int64)
            self.counted += np.bincount(groups[hit_able], minlength=self.groups)
            keep = hit_able[seen_at]
            self._grow(0, self.top + 2)
            width = self.hist.shape[1]
            flat = groups[seen_at][keep] * width + position[keep]
            # in place: a batch touches a few of the positions, not all of them
            np.add.at(self.hist.reshape(-1), flat, 1)
            if self.hist_tokens is not None:
                block_weights = np.asarray(weights, dtype=np.int64)[seen_at][keep]
                np.add.at(self.hist_tokens, position[keep], block_weights)
        self._grow(0, self.top + 2)

    @property
    def top(self) -> int:
        """The histogram's last place in use (the live blocks' deepest position)."""
        return int(self.index_of(self.live >> self.shift))

    def _fenwick(self, run_slot, run_length, run_pointer, count_of, seen_count, first_index) -> np.ndarray:
        """For each run, the blocks last referenced after its slot when its request arrives; updates the
        tree, `live` and `requests` for the whole batch. Requests with no block (most of them in a sparse
        sample) change nothing and are skipped."""
        tree, live = self.tree, self.live
        measure_from = self.measure_from
        if first_index <= measure_from < first_index + len(count_of):
            # live does not change before the first request with blocks: the warm-up ends where it was
            before = int(
                count_of[: measure_from - first_index].sum() - seen_count[: measure_from - first_index].sum()
            )
            self.warm_blocks = live + before
        busy = np.flatnonzero(count_of)
        kernel = stack_runs()
        if kernel is not None and len(busy):
            return self._fenwick_c(
                kernel, run_slot, run_length, run_pointer, count_of, seen_count, busy, first_index
            )
        slots, lengths, pointer = run_slot.tolist(), run_length.tolist(), run_pointer.tolist()
        counts, seens = count_of.tolist(), seen_count.tolist()
        out = [0] * len(slots)
        size = len(tree) - 1
        for r in busy.tolist():
            slot = first_index + r + 1
            while slot > size:
                self.live = live
                self._grow_tree()
                size = len(tree) - 1
            begin, end = pointer[r], pointer[r + 1]
            for k in range(begin, end):
                i = slots[k]
                prefix = 0
                while i:
                    prefix += tree[i]
                    i &= i - 1
                out[k] = live - prefix
            for k in range(begin, end):
                i, run = slots[k], lengths[k]
                while i <= size:
                    tree[i] -= run
                    i += i & -i
            count = counts[r]
            i = slot
            while i <= size:
                tree[i] += count
                i += i & -i
            live += count - seens[r]
        self.live = live
        self.requests = first_index + len(counts)
        return np.array(out, dtype=np.int64)

    def _fenwick_c(self, kernel, run_slot, run_length, run_pointer, count_of, seen_count, busy, first_index):
        """_fenwick's loop in C (stack_kernel.py): the tree grown first to hold every slot of the batch."""
        while first_index + len(count_of) > len(self.tree) - 1:
            self._grow_tree()
        arrays = [
            np.ascontiguousarray(a, dtype=np.int64)
            for a in (run_slot, run_length, run_pointer, count_of, seen_count, busy)
        ]
        out = np.zeros(len(arrays[0]), dtype=np.int64)
        live = ctypes.c_int64(0)
        status = kernel(
            self.tree.buffer_info()[0],
            len(self.tree) - 1,
            self.live,
            *(a.ctypes.data for a in arrays[:5]),
            arrays[5].ctypes.data,
            len(arrays[5]),
            first_index,
            out.ctypes.data,
            ctypes.addressof(live),
        )
        if status:
            raise RuntimeError("stack_runs: a slot past the tree")
        self.live = live.value
        self.requests = first_index + len(count_of)
        return out

    def curve(self, distinct_blocks: int | None = None):
        live = self.live
        warm = live if self.measure_from >= self.requests else self.warm_blocks
        counts = self.hist[0, : live + 1] if self.groups == 1 else self.hist[:, : live + 1].sum(axis=0)
        block_cum = np.cumsum(counts)
        token_cum = np.cumsum(self.hist_tokens[: live + 1]) if self.weighted else None
        return Curve(
            block_cum=compact(block_cum),
            token_cum=compact(token_cum) if token_cum is not None else None,
            total_blocks=self.total_blocks,
            total_tokens=self.total_tokens,
            requests=self.requests,
            measure_from=self.measure_from,
            distinct_blocks=live if distinct_blocks is None else distinct_blocks,
            warm_blocks=warm,
            block_tokens=self.block_tokens,
        )


def compact(values: np.ndarray, code: str = "q") -> array:
    """A numpy array as a plain array of ints (or floats, code "d"): 8 bytes an entry, Python numbers out."""
    out = array(code)
    contiguous = np.ascontiguousarray(values, dtype=np.int64 if code == "q" else np.float64)
    out.frombytes(memoryview(contiguous).cast("B"))
    return out
