"""Block keys of a hash-id prompt made from its ids instead of its tokens.

The tokens made from hash ids (requests.py) are equal exactly when the ids are, so a chain over the ids names
the same prefixes as the engine's chain over the tokens (engine/core/hashing.py), at a hash of a few bytes a
block instead of the block's tokens. A request's chain is filled in before the engine first asks for it; the
engine hashes on from there (`extend_block_hashes` continues a chain it finds), so blocks past the prompt are
the engine's own. Only when the block size is the trace's or divides it (onepass.request_keys gives the
per-block keys); otherwise the engine hashes the tokens as usual.
"""

from __future__ import annotations

import hashlib

from engine.core.hashing import HASH_HEX_CHARS, root_hash, salted
from kvtui.whatif.onepass import request_keys

_ROOT = root_hash() + "|ids"


def prefill_keys(req, item, block_size: int) -> None:
    """Fill `req.block_keys` / `req.block_contents` (engine Request) for the full prompt blocks of `item`."""
    if block_size > item.trace_block_size or item.trace_block_size % block_size:
        return
    if req.block_contents:
        return
    parent = _ROOT
    contents = req.block_contents
    for key in request_keys(item, block_size):
        parent = hashlib.sha256(f"{parent}|{key}".encode()).hexdigest()[:HASH_HEX_CHARS]
        contents.append(parent)
    salt = req.cache_salt
    req.block_keys.extend(contents if salt is None else [salted(c, salt) for c in contents])
