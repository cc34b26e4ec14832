"""Turn a list of scheduled chunks into one flattened forward of the model through paged attention."""

from __future__ import annotations

import torch

from engine.attention import AttentionSwitch
from engine.batch import BATCH_KWARG, DecodeGroup, PagedBatch, PrefillSegment
from engine.model import needs_separate_forwards
from engine.paged_kv import PagedKV
from engine.ring import RingStore
from engine.scheduler import ScheduledChunk


class ModelRunner:
    def __init__(self, model, kv: PagedKV, windows: tuple[int | None, ...], rings: RingStore | None = None):
        self.model = model
        self.kv = kv
        self.windows = windows
        self.rings = rings if rings is not None and rings.enabled else None
        self.device = kv.kv.device
        self.separate = needs_separate_forwards(model.config)
        self.attention = AttentionSwitch(model)

    def build_batch(self, chunks: list[ScheduledChunk]) -> tuple[torch.Tensor, torch.Tensor, PagedBatch]:
        token_ids: list[int] = []
        positions: list[int] = []
        write_slots: list[torch.Tensor] = []
        prefills: list[PrefillSegment] = []
        decode_rows, decode_pos, decode_ctx = [], [], []
        chunk_rows = []
        for chunk in chunks:
            req, start, n = chunk.request, chunk.start, chunk.num_tokens
            row = len(token_ids)
            chunk_rows.append(row)
            token_ids += req.tokens[start:start + n]
            positions += range(start, start + n)
            if not self.kv.layer_slot:
                continue  # every layer keeps its K/V in rings: nothing to read or write in the pool
            context = self.kv.slots(req.block_table, 0, start + n)
            write_slots.append(context[start:])
            if n == 1:
                decode_rows.append(row)
                decode_pos.append(start)
                decode_ctx.append(context)
            else:
                prefills.append(PrefillSegment(row, row + n, start, context))
        decode = None
        if decode_rows:
            longest = max(c.shape[0] for c in decode_ctx)
            padded = torch.zeros(len(decode_ctx), longest, dtype=torch.long, device=self.device)
            for i, context in enumerate(decode_ctx):
                padded[i, :context.shape[0]] = context
            decode = DecodeGroup(
                q_index=torch.tensor(decode_rows, device=self.device),
                positions=torch.tensor(decode_pos, device=self.device),
                context_slots=padded,
                context_len=torch.tensor([c.shape[0] for c in decode_ctx], device=self.device),
                uniform=len({c.shape[0] for c in decode_ctx}) == 1,
            )
        paged_writes = torch.cat(write_slots) if write_slots else None
        batch = PagedBatch(kv=self.kv, windows=self.windows, write_slots=paged_writes,
                           prefills=prefills, decode=decode,
                           rings=self.rings.plan(chunks, chunk_rows) if self.rings is not None else None,
                           forced_window=self.rings.shape.forced_window if self.rings is not None else None)
        ids = torch.tensor([token_ids], device=self.device)
        pos = torch.tensor([positions], device=self.device)
        return ids, pos, batch

    @torch.inference_mode()
    def forward(self, chunks: list[ScheduledChunk], all_logits: bool = False) -> torch.Tensor:
        """Logits (float32) of the last token of every chunk, [len(chunks), vocab]; every token with all_logits."""
        if self.separate and len(chunks) > 1:  # e.g. longrope: one request's length must not change another's
            return torch.cat([self._forward([chunk], all_logits) for chunk in chunks])
        return self._forward(chunks, all_logits)

    def _forward(self, chunks: list[ScheduledChunk], all_logits: bool) -> torch.Tensor:
        ids, pos, batch = self.build_batch(chunks)
        if all_logits:
            keep = 0
        else:
            ends = torch.tensor([c.num_tokens for c in chunks]).cumsum(0) - 1
            keep = ends.to(self.device)
        with self.attention.paged():
            out = self.model(input_ids=ids, position_ids=pos, use_cache=False, logits_to_keep=keep,
                             **{BATCH_KWARG: batch})
        logits = out.logits[0].float()
        if self.rings is not None:
            self.rings.commit(chunks, batch.rings)
        return logits
