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

from engine.core.hashing import HASH_HEX_CHARS, block_hashes, root_hash, salted
from kvtui.whatif.block_keys import request_keys

_ROOT = root_hash() + "|ids"


def id_chain(item, block_size: int) -> list[str] | None:
    """The salt-free chain of a hash-id request's full prompt blocks, made from its ids; None when the block
    size does not divide the trace's (then the engine hashes tokens)."""
    if item.hash_ids is None or block_size > item.trace_block_size or item.trace_block_size % block_size:
        return None
    parent = _ROOT
    contents = []
    for key in request_keys(item, block_size):
        parent = hashlib.sha256(f"{parent}|{key}".encode()).hexdigest()[:HASH_HEX_CHARS]
        contents.append(parent)
    return contents


def prefill_keys(req, item, block_size: int) -> None:
    """Fill `req.block_keys` / `req.block_contents` (engine Request) for the full prompt blocks of `item`."""
    if req.block_contents:
        return
    contents = id_chain(item, block_size)
    if contents is None:
        return
    salt = req.cache_salt
    req.block_contents.extend(contents)
    req.block_keys.extend(contents if salt is None else [salted(c, salt) for c in contents])


def routing_keys(item, block_size: int) -> list[str]:
    """The keys a router looks up for the request's matchable blocks: the same chain its worker will hold."""
    matchable = max(item.num_prompt_tokens - 1, 0) // block_size
    contents = id_chain(item, block_size)
    if contents is None:
        prompt = item.prompt_token_ids()
        return block_hashes(prompt[: matchable * block_size], block_size, item.cache_salt)[0]
    salt = item.cache_salt
    return [c if salt is None else salted(c, salt) for c in contents[:matchable]]
