"""Any workload as a Mooncake-format file that can be shared: no token ids, no text, only what the cache sees.

    kvtui whatif requests.jsonl --export-anonymized shared.jsonl --anonymize-key "$KEY"

Each block of B tokens becomes one id, a keyed hash (HMAC-SHA256 with the user's key) of the block's chained
content: the engine's hash of its whole prefix (engine/core/hashing.py, cache salt included) for a token
workload, or the chain of its ids for a hash-id one. So two requests share an id exactly where they share
the whole prefix up to that block, and nothing else is kept: the same tokens after another prefix get
another id, equal ids never reveal content, and without the key nobody can test a guessed prompt against the
file. The last, partly filled block gets its own id (its prefix and its tokens). Arrivals become
milliseconds from the first, outputs their lengths. Replaying the file gives the same one-pass curve at
block size B (tests/kvtui/whatif/test_formats.py).

Ids are 46 bits (Mooncake's readers take integers; kvtui's take ids below 2^47): among a million distinct
blocks, the chance that two of them share an id is under 1%, and such a pair misnames one block.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path

from engine.core.hashing import chain_hash, salted
from kvtui.whatif.hash_keys import id_chain
from kvtui.whatif.requests import SimRequest, Workload

ID_BITS = 46


def keyed_id(key: bytes, content: str) -> int:
    digest = hmac.new(key, content.encode(), hashlib.sha256).digest()
    return int.from_bytes(digest[:8], "big") >> (64 - ID_BITS)


def request_ids(request: SimRequest, block: int, key: bytes) -> list[int]:
    """The anonymized ids of the request's blocks of `block` tokens, the last one partly filled."""
    n = request.num_prompt_tokens
    blocks = -(-n // block)
    chain = id_chain(request, block) if request.hash_ids is not None else None
    if chain is not None:
        # a hash-id request: its ids chained, and the partly filled last block named by its place in its id
        contents = list(chain)
        if len(contents) < blocks:
            tail = request_tail(request, block)
            contents.append(chain_hash(contents[-1] if contents else "root", tail))
    else:
        tokens = request.prompt_token_ids()
        contents, parent = [], salted("root", request.cache_salt)
        for i in range(blocks):
            parent = chain_hash(parent, tokens[i * block : (i + 1) * block])
            contents.append(salted(parent, request.cache_salt))
    return [keyed_id(key, c) for c in contents]


def request_tail(request: SimRequest, block: int) -> list[int]:
    """A hash-id request's partly filled last block, as the ids and token count that make it."""
    n = request.num_prompt_tokens
    start = n // block * block
    trace = request.trace_block_size
    first, last = start // trace, (n - 1) // trace
    return [*request.hash_ids[first : last + 1], start % trace, n - start]


def export(workload: Workload, path: str | Path, block: int, key: bytes) -> dict:
    """Write the workload as an anonymized Mooncake JSONL; what was written."""
    if not key:
        raise ValueError("an empty key protects nothing: give --anonymize-key or KVTUI_ANONYMIZE_KEY")
    path = Path(path)
    distinct: set[int] = set()
    t0 = workload.requests[0].arrival if workload.requests else 0.0
    with open(path, "w", encoding="utf-8") as out:
        for request in workload.requests:
            ids = request_ids(request, block, key)
            distinct.update(ids)
            record = {
                "timestamp": round((request.arrival - t0) * 1000, 3),
                "input_length": request.num_prompt_tokens,
                "output_length": request.num_output_tokens,
                "hash_ids": ids,
            }
            out.write(json.dumps(record) + "\n")
    return {
        "path": str(path),
        "requests": workload.num_requests,
        "blocks": len(distinct),
        "block_size": block,
    }
