"""Chained hashes over token ids: one key names a whole prefix. Used by the radix tree (whole blocks), the tails
(partly filled blocks, keyed by the block before them) and the ring snapshots (every `interval` positions).

    content_i = sha256(content_{i-1}, token ids of span i)     span 0 chains on a root that names the weights
    key_i     = content_i with no cache salt, else sha256(salt, content_i)

Different salts give different keys from span 0 on, so tenants never share a block. The salt-free contents let
the miss explainer say "another salt holds this prefix". 64 bits (16 hex chars): ample for one cache, short in
the trace.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence

HASH_HEX_CHARS = 16


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:HASH_HEX_CHARS]


def root_hash(adapter_id: str | None = None) -> str:
    """Parent of block 0: names the weights (a LoRA adapter) whose K/V the chain describes."""
    return _sha(f"kvtui-block-v1|adapter={adapter_id or ''}".encode())


def chain_hash(parent: str, token_ids: Sequence[int]) -> str:
    """Content hash of one span: its parent's hash and its token ids (little-endian int64, stable anywhere)."""
    return _sha(parent.encode() + b"|" + struct.pack(f"<{len(token_ids)}q", *token_ids))


def salted(content: str, cache_salt: str | None) -> str:
    if cache_salt is None:
        return content
    return _sha(f"salt={cache_salt}|{content}".encode())


def block_hashes(
    token_ids: Sequence[int], block_size: int, cache_salt: str | None = None, adapter_id: str | None = None
) -> tuple[list[str], list[str]]:
    """(keys, contents) of every full block of `token_ids`."""
    keys: list[str] = []
    contents: list[str] = []
    extend_block_hashes(
        token_ids, block_size, len(token_ids) // block_size, keys, contents, cache_salt, adapter_id
    )
    return keys, contents


def extend_block_hashes(
    token_ids: Sequence[int],
    block_size: int,
    num_blocks: int,
    keys: list[str],
    contents: list[str],
    cache_salt: str | None = None,
    adapter_id: str | None = None,
) -> None:
    """Grow (keys, contents) of `block_hashes` in place to the first `num_blocks` blocks: each block is hashed
    once over a request's life, not the whole chain again whenever one more block fills."""
    parent = contents[-1] if contents else root_hash(adapter_id)
    for i in range(len(contents), num_blocks):
        parent = chain_hash(parent, token_ids[i * block_size : (i + 1) * block_size])
        contents.append(parent)
        keys.append(salted(parent, cache_salt))


def root_key(cache_salt: str | None) -> str:
    """Where a tail at position 0 hangs: no block before it, so the root and the salt name it."""
    return f"root|{cache_salt or ''}"


def ring_root(cache_salt: str | None) -> str:
    """Parent of the first ring snapshot: salted at the root, so tenants never resume from each other's rings."""
    return _sha(f"kvtui-ring|salt={cache_salt or ''}".encode())


def span_hashes(
    token_ids: Sequence[int], span: int, upto: int, root: str, keys: Sequence[str] = ()
) -> list[str]:
    """Chained hash at every multiple of `span` <= upto, continuing the chain `keys` already computed."""
    keys = list(keys)
    parent = keys[-1] if keys else root
    for i in range(len(keys), upto // span):
        parent = chain_hash(parent, token_ids[i * span : (i + 1) * span])
        keys.append(parent)
    return keys
