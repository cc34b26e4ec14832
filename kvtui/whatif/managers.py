"""The engine's KVCacheManager as the what-if runs use it, with one difference, stated here.

`PromptOnlyCacheManager` is for hash-id workloads (Mooncake): generated tokens take pool space while their
request runs but never enter the prefix cache (`cache_blocks` and `free` see the request as computed up to
its prompt at most), since their content is unknown and the next turn's hash ids already carry it.

Token workloads use `KVCacheManager` itself, unchanged.
"""

from __future__ import annotations

from engine.core.kv_cache import KVCacheManager
from engine.core.request import Request


class PromptOnlyCacheManager(KVCacheManager):
    def cache_blocks(self, req: Request) -> None:
        computed, prompt = req.num_computed, len(req.prompt_token_ids)
        if computed <= prompt:
            return super().cache_blocks(req)
        if req.blocks_in_tree >= min(prompt // self.block_size, len(req.block_table)):
            # decoding: every full prompt block is in the tree already
            return None
        req.num_computed = prompt
        try:
            super().cache_blocks(req)
        finally:
            req.num_computed = computed

    def free(self, req: Request) -> None:
        computed, prompt = req.num_computed, len(req.prompt_token_ids)
        if computed > prompt:
            req.num_computed = prompt
        try:
            super().free(req)
        finally:
            req.num_computed = computed
