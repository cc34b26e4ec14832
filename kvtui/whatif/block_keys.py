"""The keys of a request's full prompt blocks at a block size (onepass.py's keys, hash_keys.py's chains):
what names a block, without importing numpy.

Keys: a hash-id workload uses its ids (when the block size is the trace's), an id and the block's place in
it (when the block size divides the trace's), or the run of ids a block covers (when it is a multiple of
it): the tokens made from hash ids (requests.py) are equal exactly when the ids are, so these name the same
blocks as the engine's hashes, at no hashing cost. Otherwise the engine's chained block hashes of the prompt
(engine/core/hashing.py, salted), which is what the manager matches.
"""

from __future__ import annotations

from engine.core.hashing import block_hashes
from kvtui.whatif.requests import SimRequest


def request_keys(request: SimRequest, block_size: int) -> list:
    """The keys of the request's full prompt blocks at this block size."""
    n = request.num_prompt_tokens
    full = n // block_size
    ids, trace_block = request.hash_ids, request.trace_block_size
    if ids is not None and block_size == trace_block:
        return list(ids[:full])
    if ids is not None and trace_block % block_size == 0:
        per = trace_block // block_size
        # block j lies in id j // per, at place j % per: one int names both
        return [ids[j // per] * per + j % per for j in range(full)]
    if ids is not None and block_size % trace_block == 0:
        per = block_size // trace_block
        return [tuple(ids[j * per : (j + 1) * per]) for j in range(full)]
    return block_hashes(request.prompt_token_ids()[: full * block_size], block_size, request.cache_salt)[0]
