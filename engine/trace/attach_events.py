"""Event types of an attach trace: what `kvtui attach` recorded from vLLM / SGLang publishers, normalised.

An attached engine publishes a hash space, not physical blocks: blocks are keyed by (worker, group, hash) and
chained by parent hash, and each stored block carries its token ids. So these events have no physical block
ids, ref counts, locks or requests; they say which worker holds which hashed block, and what the stream lost.
The header of an attach trace has `"kind": "attach"` and `config.sources` (every SOURCE as given);
block_size and num_blocks are 0 there (workers may differ; each stored block carries its own size), and
`wall_clock` is the wall-clock time of t=0: `engine_ts - wall_clock` is when a batch happened on the trace's
clock (a replayed one may be before the attach: negative).
Torch-free, like schema.py, which merges this table into EVENT_FIELDS.
"""

from __future__ import annotations

_INT, _FLOAT, _STR, _LIST, _DICT = "int", "float", "str", "list", "dict"

ATTACH_EVENT_FIELDS: dict[str, dict[str, tuple[str, str]]] = {
    "attach_worker": {
        "worker": (_STR, "worker id used by the events below (name, plus #rN for a rank of a shared stream)"),
        "source": (_STR, "endpoint as given on the command line (tcp://HOST:PORT)"),
        "name": (_STR, "display name (name= option, else HOST:PORT)"),
        "rank": (
            _INT + "?",
            "data-parallel rank from the payload (vLLM data_parallel_rank, SGLang attn_dp_rank)",
        ),
        "replay": (_STR + "?", "replay endpoint used to recover gaps"),
        "metrics": (_STR + "?", "/metrics URL polled for usage, hit rate and TTFT"),
        "blocks": (_INT + "?", "GPU blocks of the worker, when told (blocks= option); /metrics may tell too"),
    },
    "kv_block_stored": {
        "worker": (_STR, "worker that stored the blocks"),
        "hashes": (_LIST, "block hashes as u64 hex (16 digits), in chain order"),
        "parent": (_STR + "?", "hash of the block before the first one (null: the chain starts at the root)"),
        "token_ids": (
            _LIST,
            "token ids of the blocks, block_size per hash (SGLang token pairs: the first of each); empty when "
            "an offloading tier stored hashes it had no tokens for (vLLM's placeholders)",
        ),
        "block_size": (_INT, "tokens per block in this event (0 in vLLM's offloading placeholders)"),
        "group": (_INT, "KV-cache group (vLLM group_idx for hybrid models; 0 when not given)"),
        "medium": (
            _STR + "?",
            "tier the blocks are stored on, as the engine named it: GPU, CPU, STORAGE (vLLM), CPU_PINNED, "
            "DISK, EXTERNAL (SGLang), ... (null: not given, taken as GPU)",
        ),
        "locality": (_STR + "?", "vLLM's LOCAL / REMOTE (the tier relative to the publisher), when given"),
        "ownership": (
            _STR + "?",
            "vLLM's secondary offloading tier that stored them (e.g. kvcr): held apart from the primary tier "
            "on the same medium",
        ),
        "lora": (_STR + "?", "LoRA adapter name (or id) the blocks belong to"),
        "salt": (_STR + "?", "cache salt (SGLang's cache_salt; vLLM puts its salt in extra_keys)"),
        "texts": (_LIST + "?", "text of each token (only with --tokenizer)"),
        "extra_keys": (_LIST + "?", "vLLM's extra hash keys per block (LoRA name, multimodal ids, salt)"),
        "spec_kind": (
            _STR + "?",
            "vLLM's kv_cache_spec_kind of the group (full attention, sliding window, ...)",
        ),
        "sliding_window": (_INT + "?", "vLLM's kv_cache_spec_sliding_window of the group"),
        "token_pairs": (
            "bool?",
            "SGLang sent (token, next token) pairs (EAGLE); token_ids holds the first of each",
        ),
        "wire_seq": (_INT, "publisher's sequence number of the batch"),
        "engine_ts": (_FLOAT, "publisher's timestamp of the batch"),
    },
    "kv_block_removed": {
        "worker": (_STR, "worker that dropped the blocks"),
        "hashes": (_LIST, "block hashes as u64 hex"),
        "group": (_INT, "KV-cache group"),
        "medium": (_STR + "?", "tier the blocks left (null: GPU)"),
        "locality": (_STR + "?", "vLLM's LOCAL / REMOTE, when given"),
        "ownership": (_STR + "?", "vLLM's secondary offloading tier the blocks left, when given"),
        "wire_seq": (_INT, "publisher's sequence number of the batch"),
        "engine_ts": (_FLOAT, "publisher's timestamp of the batch"),
    },
    "kv_all_cleared": {
        "worker": (_STR, "worker whose cache was cleared"),
        "cause": (_STR, "cleared (AllBlocksCleared from the engine) | restart (the publisher started again)"),
    },
    "attach_gap": {
        "source": (_STR, "endpoint of the stream"),
        "kind": (
            _STR,
            "gap (sequence numbers skipped) | late_join (joined after batch 0) | restart (the sequence "
            "went back, or /metrics showed a new process)",
        ),
        "expected": (_INT, "first missing sequence number"),
        "got": (_INT, "sequence number that revealed the gap"),
        "recovered": (_INT, "missing batches fetched from the replay endpoint"),
        "lost": (_INT, "missing batches no replay could fill (deltas lost: residency may be wrong)"),
    },
    "attach_malformed": {
        "source": (_STR, "endpoint the message came from"),
        "reason": (_STR, "what was wrong (frames, sequence, msgpack, fields, oversized)"),
        "size": (_INT, "bytes in the message"),
    },
    "attach_metrics": {
        "source": (_STR, "endpoint whose server's /metrics was read"),
        "rank": (_STR, "rank label of the samples ('' when not labelled)"),
        "facts": (
            _DICT,
            "kv_usage, prefix_queries, prefix_hits, hit_rate, preemptions, running, waiting, "
            "num_gpu_blocks, block_size, cache_dtype (how the server stores K/V: auto = the model's dtype, "
            "fp8, int8_per_token_head, ...), ttft_buckets, ttft_count, ttft_sum, started (the process start "
            "time); offloading tiers: external_queries, external_hits (vLLM's connector tokens), "
            "offload_load_bytes, offload_store_bytes, offload_load_seconds, offload_store_seconds, "
            "offload_load_blocks, offload_capacity_blocks, offload_backend (vLLM), cached_tokens (SGLang's hit "
            "tokens by source: device, host, storage, total), host_used_tokens, host_total_tokens, "
            "offload_load_tokens, offload_store_tokens, storage_store_tokens, evicted_tokens (SGLang HiCache) "
            "(those the page has)",
        ),
    },
    "attach_server": {
        "source": (_STR, "endpoint whose server's /metrics was read"),
        "up": (
            "bool",
            "false: its /metrics stopped answering (the server may be down: its blocks are stale)",
        ),
        "reason": (_STR, "why it is taken as down (the error), or 'answers again'"),
    },
}
