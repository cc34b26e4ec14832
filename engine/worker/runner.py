"""Turn a list of scheduled chunks into one flattened forward of the model through paged attention, and sample.

The runner owns the K/V memory (PagedKV, RingTensors). Before each forward it applies what the torch-free
manager recorded since the last one, in order: the pool's block copies (copy-on-write) and the rings' row copies
and snapshot restores (engine/core/blocks.py, engine/core/rings.py).
"""

from __future__ import annotations

import itertools
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field

import torch

from engine.core.blocks import BlockPool
from engine.core.group_blocks import GroupBlocks
from engine.core.request import Request, SamplingParams
from engine.core.scheduler import ScheduledChunk
from engine.models.loading import needs_separate_forwards
from engine.worker import run_plan
from engine.worker.attention import AttentionSwitch
from engine.worker.batch import BATCH_KWARG, DecodeGroup, PagedBatch, PrefillSegment
from engine.worker.fused_fit import intercepted
from engine.worker.paged_kv import BlockTables, PagedKV
from engine.worker.ring_tensors import RingTensors
from engine.worker.run_plan import PAGED_DECODE, RunPlan
from engine.worker.sampling import sample
from engine.worker.scoring import token_logprobs
from engine.worker.tier_tensors import HostKV, apply_copies


@dataclass
class StepResult:
    """One forward's answer: the token sampled for each chunk whose sequence is complete (None for a prefill
    chunk that is not the last), and the logits rows for more samples of the same row (SamplingParams.n)."""

    token_ids: list[int | None]
    # [len(chunks), vocab] float32
    logits: torch.Tensor
    # argmax of every row when any request is greedy: one transfer from the device for the whole step
    greedy: list[int] | None
    # chunk index -> [m] log-probabilities of prompt tokens start + 1 .. start + m (SamplingParams.prompt_logprobs)
    prompt_logprobs: dict[int, torch.Tensor] = field(default_factory=dict)

    def sample(self, index: int, params: SamplingParams, generator: torch.Generator | None) -> int:
        """Another sample from row `index` (a parallel sample with its own generator)."""
        if params.temperature == 0 and self.greedy is not None:
            return self.greedy[index]
        return sample(self.logits[index], params, generator)


def length_buckets(positions: list[int], most: int = 4, spread: float = 1.5) -> list[list[int]]:
    """Decodes grouped by context length, longest first, so a short context is not padded to a long one: a
    group takes contexts down to 1/spread of its longest; at most `most` groups (each is one attention call
    per layer), the last takes the rest. Indices into `positions`."""
    order = sorted(range(len(positions)), key=lambda i: -positions[i])
    groups: list[list[int]] = []
    for i in order:
        if groups and (len(groups) == most or (positions[i] + 1) * spread >= positions[groups[-1][0]] + 1):
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


class ModelRunner:
    def __init__(
        self,
        model,
        kv: PagedKV,
        pool: BlockPool,
        windows: tuple[int | None, ...],
        rings: RingTensors | None = None,
        plan: RunPlan | None = None,
        host: HostKV | None = None,
        group_blocks: GroupBlocks | None = None,
    ):
        """`plan`: which implementation runs each operation (engine/worker/run_plan.py); None chooses the one
        for the model's device and dtype. An operation this machine or model cannot take as planned runs the
        reference path: `self.plan` says what runs."""
        self.model = model
        self.kv = kv
        # the host tier's slab (engine/worker/tier_tensors.py), None without one
        self.host = host
        self.pool = pool
        self.windows = windows
        self.rings = rings if rings is not None and rings.manager.enabled else None
        self.device = kv.kv.device
        self.separate = needs_separate_forwards(model.config)
        self.attention = AttentionSwitch(model)
        self.tables = BlockTables(self.device)
        # window_layout="paged": the other KV-cache groups' (index, layers), their tables (the manager's
        # GroupBlocks) and a tensor store per group
        self.group_blocks = group_blocks
        self.groups = []
        if group_blocks is not None:
            self.groups = [(g, group_blocks.groups[g].layers) for g in group_blocks.others]
        self.group_tables = {g: BlockTables(self.device) for g, _ in self.groups}
        wanted = plan or RunPlan.for_device(self.device, kv.dtype)
        self.plan, self.linears, self.fused = run_plan.build(
            wanted,
            model,
            self.device,
            kv.dtype,
            windows,
            len(kv.layer_slot),
            separate=self.separate,
            rings=self.rings is not None,
            kv_dtype=None if kv.quant is None else kv.quant.name,
            shape=kv.shape,
            block_size=kv.block_size,
        )
        # a list: each forward's model call is timed into it (bench)
        self.model_seconds: list[float] | None = None
        # why every step runs through the modules now (through_modules), none: the plan's step
        self._through_modules: list[str] = []

    @contextmanager
    def through_modules(self, reason: str):
        """Every step through the model's modules while this is in force: a hook or a replaced forward on a
        module sees every call there (the fused step calls no module's forward; engine/worker/fused_fit.py)."""
        self._through_modules.append(reason)
        try:
            yield
        finally:
            self._through_modules.remove(reason)

    def build_batch(
        self, chunks: list[ScheduledChunk], probe: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, PagedBatch]:
        # K/V copies and tier moves the manager decided since the last forward (the rings' own ops are applied
        # in plan)
        apply_copies(self.pool.take_copies(), self.kv, self.host)
        token_ids: list[int] = []
        positions: list[int] = []
        chunk_rows = []
        for chunk in chunks:
            req, start, n = chunk.request, chunk.start, chunk.num_tokens
            chunk_rows.append(len(token_ids))
            token_ids += req.token_slice(start, start + n)
            positions += range(start, start + n)
        # False: every layer keeps its K/V in rings, nothing to read or write
        paged = bool(self.kv.layer_slot)
        paged_writes, prefills, decodes = None, [], []
        if paged:
            paged_writes, prefills, decodes = self._paged_part(chunks, chunk_rows, self.tables)
        batch = PagedBatch(
            kv=self.kv,
            windows=self.windows,
            write_slots=paged_writes,
            prefills=prefills,
            decodes=decodes,
            rings=self.rings.plan(chunks, chunk_rows) if self.rings is not None else None,
            forced_window=self.rings.shape.forced_window if self.rings is not None else None,
        )
        # window_layout="paged": each other KV-cache group reads and writes through its own tables
        for g, layers in self.groups:
            tables = self.group_tables[g]
            writes, group_prefills, group_decodes = self._paged_part(chunks, chunk_rows, tables, g)
            part = PagedBatch(self.kv, self.windows, writes, group_prefills, group_decodes)
            batch.by_layer.update(dict.fromkeys(layers, part))
            if not probe:
                tables.keep_only(chunk.request.request_id for chunk in chunks)
        if not probe:
            self.tables.keep_only(chunk.request.request_id for chunk in chunks)
        ids, pos = torch.tensor([token_ids, positions], device=self.device).split(1)
        return ids, pos, batch

    def _paged_part(
        self,
        chunks: list[ScheduledChunk],
        chunk_rows: list[int],
        tables: BlockTables,
        group: int | None = None,
    ) -> tuple[torch.Tensor | None, list[PrefillSegment], list[DecodeGroup]]:
        """Where each chunk writes its K/V and what it reads, through its block table (`group`: a KV-cache
        group's, window_layout="paged"; its blocks before the window are None, read as block 0 and masked)."""
        # slot tensors of prefill chunks, slot lists of decodes
        writes: list[torch.Tensor | list[int]] = []
        prefills: list[PrefillSegment] = []
        decode_rows, decode_pos, decode_tables = [], [], []
        size = self.kv.block_size
        for chunk, row in zip(chunks, chunk_rows):
            req, start, n = chunk.request, chunk.start, chunk.num_tokens
            table = req.block_table
            if group is not None:
                table = [0 if b is None else b for b in self.group_blocks.table(req.request_id, group)]
            if n == 1:
                block = table[start // size]
                if writes and isinstance(writes[-1], list):
                    writes[-1].append(block * size + start % size)
                else:
                    writes.append([block * size + start % size])
                decode_rows.append(row)
                decode_pos.append(start)
                decode_tables.append(tables.get(req, table)[: start // size + 1])
            else:
                blocks = tables.get(req, table)[: -(-(start + n) // size)]
                writes.append(self.kv.slots_of(blocks, start, start + n))
                prefills.append(PrefillSegment(row, row + n, start, blocks))
        decodes = []
        # the kernel pads nothing: one group; SDPA pads a group to its longest: groups of like lengths
        in_place = self.plan.attention == PAGED_DECODE
        if in_place:
            buckets = [list(range(len(decode_pos)))] if decode_pos else []
        else:
            buckets = length_buckets(decode_pos)
        for bucket in buckets:
            pos = [decode_pos[i] for i in bucket]
            blocks = [decode_tables[i] for i in bucket]
            decode = DecodeGroup(
                q_index=torch.tensor([decode_rows[i] for i in bucket], device=self.device),
                positions=torch.tensor(pos, device=self.device),
                blocks=blocks[0][None] if len(blocks) == 1 else torch.nn.utils.rnn.pad_sequence(blocks, True),
                longest=max(pos) + 1,
                uniform=min(pos) == max(pos),
            )
            if in_place:
                decode.lengths = decode.positions + 1
            decodes.append(decode)
        paged_writes = None
        if writes:
            parts = [
                w if isinstance(w, torch.Tensor) else torch.tensor(w, device=self.device) for w in writes
            ]
            paged_writes = parts[0] if len(parts) == 1 else torch.cat(parts)
        return paged_writes, prefills, decodes

    @torch.inference_mode()
    def forward(
        self, chunks: list[ScheduledChunk], all_logits: bool = False, scored: set[int] = frozenset()
    ) -> torch.Tensor:
        """Logits (float32) of the last token of every chunk, [len(chunks), vocab]; every token with all_logits;
        with `scored` (chunk indices), every row of those chunks and the last row of the others, in order."""
        # e.g. longrope: one request's length must not change another's
        if self.separate and len(chunks) > 1:
            return torch.cat(
                [self._forward([c], all_logits, {0} if i in scored else set()) for i, c in enumerate(chunks)]
            )
        return self._forward(chunks, all_logits, scored)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def execute(self, chunks: list[ScheduledChunk]) -> StepResult:
        """One forward, then a token for every chunk that completes its sequence, sampled with its request's
        parameters and generator (greedy rows: one argmax for the whole step, one device sync)."""
        # chunks with prompt tokens to score after their first position
        scored = {
            i
            for i, c in enumerate(chunks)
            if c.request.params.prompt_logprobs and c.start + 1 < len(c.request.prompt_token_ids)
        }
        logits = self.forward(chunks, scored=scored)
        prompt_logprobs = {}
        if scored:
            last, row = [], 0
            for i, chunk in enumerate(chunks):
                if i in scored:
                    n, prompt = chunk.num_tokens, chunk.request.prompt_token_ids
                    targets = prompt[chunk.start + 1 : chunk.start + n + 1]
                    prompt_logprobs[i] = token_logprobs(logits[row : row + n], targets)
                    row += n
                else:
                    row += 1
                last.append(row - 1)
            logits = logits[last]
        greedy = None
        if any(chunk.request.params.temperature == 0 for chunk in chunks):
            greedy = logits.argmax(-1).tolist()
        result = StepResult([], logits, greedy, prompt_logprobs)
        for index, chunk in enumerate(chunks):
            req = chunk.request
            complete = chunk.start + chunk.num_tokens == req.num_tokens
            result.token_ids.append(result.sample(index, req.params, req.generator) if complete else None)
        return result

    def _forward(
        self,
        chunks: list[ScheduledChunk],
        all_logits: bool,
        scored: set[int] = frozenset(),
        probe: bool = False,
    ) -> torch.Tensor:
        ids, pos, batch = self.build_batch(chunks, probe)
        # a probe (score_span) writes nothing the cache holds
        for part in (batch, *batch.by_layer.values()):
            part.read_only = probe
        if all_logits or all(c.num_tokens == 1 for c in chunks):
            # every row (decodes only: one row per chunk already)
            keep = 0
        elif scored:
            # every row of a scored chunk, the last row of the others
            rows, row = [], 0
            for i, c in enumerate(chunks):
                rows += range(row, row + c.num_tokens) if i in scored else [row + c.num_tokens - 1]
                row += c.num_tokens
            keep = torch.tensor(rows, device=self.device)
        elif len(chunks) == 1:
            # the last row
            keep = 1
        else:
            keep = (
                torch.tensor(list(itertools.accumulate(c.num_tokens for c in chunks)), device=self.device) - 1
            )
        timing = self.model_seconds is not None
        if timing:
            self._sync()
            started = time.perf_counter()
        if self.fused is not None and not self._through_modules and not intercepted():
            logits = self.fused.forward(ids, pos, batch, keep, self.linears)
        else:
            linears = nullcontext() if self.linears is None else self.linears.swapped_in()
            with self.attention.paged(), linears:
                out = self.model(
                    input_ids=ids,
                    position_ids=pos,
                    use_cache=False,
                    logits_to_keep=keep,
                    **{BATCH_KWARG: batch},
                )
            logits = out.logits[0].float()
        if timing:
            self._sync()
            self.model_seconds.append(time.perf_counter() - started)
        if self.rings is not None and probe:
            # the probe's own ring row continues there next (no commit: no snapshot, no event)
            self.rings.manager.states[chunks[0].request.request_id].wrote(
                chunks[0].start + chunks[0].num_tokens
            )
        elif self.rings is not None:
            # the engine core commits the rings' bookkeeping with the step (EngineCore.update_from_output);
            # the snapshots this forward took wait here for its decisions (RingTensors.commit)
            self.rings.forward_batch = batch.rings
        return logits

    @torch.inference_mode()
    def score_span(self, req: Request, first: int, end: int, chunk_tokens: int = 256) -> torch.Tensor:
        """[end - first] log-probabilities of tokens first + 1 .. end of `req`, from the logits at positions
        first .. end - 1, computed again by a probe that writes nothing the cache holds (engine/worker/scoring.py):
        paged layers read the request's valid blocks before `first` as a prefix and never write; ring layers run
        from 0 in a ring row of the probe's own; with window_layout="paged", the whole span from 0 is one chunk.
        Needs the request's K/V valid in its blocks before `end`."""
        tokens = req.tokens
        start = 0 if self.rings is not None else first
        stop = end
        if self.groups:
            # window_layout="paged": a window group may hold only the window before the hit; one chunk from 0
            # reads nothing from the pool (its writes are off, its slots go through the request's tables)
            start, chunk_tokens = 0, max(end, 2)
            probe_tables = self.group_blocks.tables.get(req.request_id, {})
        # a one-token chunk would run as a decode (which reads its own K/V from the pool): take two
        if stop - start < 2:
            start, stop = (start - 1, stop) if start > 0 else (start, stop + 1)
        probe = Request(f"{req.request_id}#score", list(tokens), SamplingParams(), 0.0)
        probe.block_table = req.block_table
        if self.groups:
            self.group_blocks.tables[probe.request_id] = probe_tables
        bounds = list(range(start, stop, chunk_tokens)) + [stop]
        # no one-token piece at the end
        if len(bounds) > 2 and bounds[-1] - bounds[-2] < 2:
            del bounds[-2]
        rows = []
        try:
            for s, e in zip(bounds, bounds[1:]):
                logits = self._forward([ScheduledChunk(probe, s, e - s)], all_logits=True, probe=True)
                lo, hi = max(s, first), min(e, end)
                if hi > lo:
                    rows.append(token_logprobs(logits[lo - s :], tokens[lo + 1 : hi + 1]))
        finally:
            if self.rings is not None:
                self.rings.manager.free(probe.request_id)
            self.tables.known.pop(probe.request_id, None)
            if self.group_blocks is not None:
                self.group_blocks.tables.pop(probe.request_id, None)
            for tables in self.group_tables.values():
                tables.known.pop(probe.request_id, None)
        return torch.cat(rows)
