"""Event types of the engine's trace: requests and scheduling, the block pool, the prefix cache (radix tree),
edits, sliding-window rings, what-if runs and the machine's roofline, each with its fields. Field name ->
(json type, meaning); a type ending in "?" may be null or left out. Torch-free, like schema.py, which merges
this table with attach_events.py's into EVENT_FIELDS.
"""

from __future__ import annotations

_INT, _FLOAT, _STR, _LIST, _DICT = "int", "float", "str", "list", "dict"

ENGINE_EVENT_FIELDS: dict[str, dict[str, tuple[str, str]]] = {
    # --- requests and scheduling -------------------------------------------------------------------------
    "request_arrived": {
        "request_id": (_STR, "id of the request"),
        "prompt_token_ids": (_LIST, "prompt token ids"),
        "prompt_texts": (_LIST, "decoded text of each prompt token"),
        "max_tokens": (_INT, "generation limit"),
        "cache_salt": (_STR + "?", "tenant salt; requests with different salts never share blocks"),
        "parent_id": (_STR + "?", "the request this one was forked from, if any"),
        "phase": (_STR + "?", "workload phase label (e.g. cold, warm) that `kvtui stats` groups by"),
    },
    "request_scheduled": {
        "request_id": (_STR, "admitted to the running batch"),
        "num_computed": (_INT, "tokens whose K/V are already valid when admitted (prefix hit)"),
    },
    "request_preempted": {
        "request_id": (
            _STR,
            "request that gave its blocks back: the latest admitted when a decode found no free block, or a "
            "waiting one holding blocks (after an edit) when a step could place nothing",
        ),
        "num_tokens": (_INT, "tokens that will be recomputed when it is readmitted"),
    },
    "prefill_chunk": {
        "request_id": (_STR, "request being prefilled"),
        "step": (_INT, "engine step"),
        "start": (_INT, "first position computed in this chunk"),
        "end": (_INT, "one past the last position computed"),
    },
    "decode": {
        "request_id": (_STR, "request decoding one token"),
        "step": (_INT, "engine step"),
        "position": (_INT, "position whose K/V is written"),
    },
    "step": {
        "step": (_INT, "engine step number"),
        "num_tokens": (_INT, "tokens run through the model in this step"),
        "num_prefill": (_INT, "prefill chunks in the batch"),
        "num_decode": (_INT, "decode requests in the batch"),
        "duration": (_FLOAT, "seconds the step took (forward + sampling)"),
        "free_blocks": (_INT, "free blocks after the step"),
    },
    "token_emitted": {
        "request_id": (_STR, "request that produced the token"),
        "position": (_INT, "position of the token in the sequence"),
        "token_id": (_INT, "token id"),
        "text": (_STR, "decoded text of the token"),
    },
    "request_finished": {
        "request_id": (_STR, "request that finished"),
        "reason": (_STR, "eos | stop | length | aborted"),
        "num_prompt_tokens": (_INT, "prompt length"),
        "num_output_tokens": (_INT, "generated tokens"),
        "cached_tokens": (_INT, "prompt tokens served from the prefix cache"),
        "ttft": (_FLOAT + "?", "seconds from arrival to the first token"),
        "tpot": (_FLOAT + "?", "(t_last - t_first) / (n - 1); null for a single token"),
    },
    # --- the block pool ----------------------------------------------------------------------------------
    "block_allocated": {
        "physical": (_INT, "physical block taken from the free list (ref count becomes 1)"),
        "request_id": (_STR, "owner"),
        "logical": (_INT, "logical index in the owner's block table"),
        "group": (_INT + "?", "KV-cache group of the block (window_layout='paged'; header kv_groups)"),
    },
    "block_shared": {
        "physical": (_INT, "existing block added to another block table"),
        "request_id": (_STR, "new owner"),
        "logical": (_INT, "logical index in the new owner's block table"),
        "ref_count": (_INT, "ref count after the change"),
        "group": (_INT + "?", "KV-cache group of the block (window_layout='paged'; header kv_groups)"),
    },
    "block_released": {
        "physical": (_INT, "block dropped from a block table"),
        "request_id": (_STR, "owner that dropped it"),
        "logical": (_INT, "logical index it had"),
        "ref_count": (_INT, "ref count after the change"),
        "group": (_INT + "?", "KV-cache group of the block (window_layout='paged'; header kv_groups)"),
    },
    "block_freed": {
        "physical": (_INT, "block returned to the free list (ref count 0, not cached)"),
        "group": (_INT + "?", "KV-cache group of the block (window_layout='paged'; header kv_groups)"),
    },
    "block_copied": {
        "src": (_INT, "shared block that was about to be written (copy-on-write)"),
        "dst": (_INT, "fresh block that received the copy; replaces src in the writer's table"),
        "request_id": (_STR, "the writer"),
        "logical": (_INT, "logical index in the writer's table"),
        "num_tokens": (_INT, "valid tokens copied"),
        "group": (_INT + "?", "KV-cache group of the block (window_layout='paged'; header kv_groups)"),
    },
    # --- the prefix cache (radix tree) -------------------------------------------------------------------
    "block_cached": {
        "physical": (_INT, "block whose last owner left; it stays in the prefix tree, evictable"),
        "hash": (_STR, "chained block hash (hex)"),
        "group": (_INT + "?", "KV-cache group of the block (window_layout='paged'; header kv_groups)"),
    },
    "block_evicted": {
        "physical": (_INT, "cached block reclaimed to make room; back to the free list"),
        "hash": (_STR, "its chained hash"),
        "policy": (_STR, "eviction policy that chose it (lru | lfu | ...)"),
        "node_id": (_INT, "radix node it belonged to"),
        "group": (_INT + "?", "KV-cache group of the block (window_layout='paged'; header kv_groups)"),
    },
    "block_stored": {
        "physical": (_INT, "a full block of a KV-cache group other than the table's, now found by its hash"),
        "hash": (_STR, "chained block hash (hex)"),
        "group": (_INT, "KV-cache group (header kv_groups)"),
        "request_id": (_STR, "request that computed it"),
        "logical": (_INT, "logical index in that request's table of the group"),
    },
    "radix_insert": {
        "node_id": (_INT, "new tree node"),
        "parent_id": (_INT, "its parent (0 = root)"),
        "blocks": (_LIST, "physical blocks of the node, in order"),
        "token_ids": (_LIST, "token ids the node covers"),
        "texts": (_LIST, "decoded text of each token"),
        "request_id": (_STR + "?", "request whose blocks were inserted"),
        "hashes": (_LIST + "?", "chained hash (key) of each block, in order"),
    },
    "radix_split": {
        "node_id": (_INT, "node that was split; keeps the first `at` blocks"),
        "new_node_id": (_INT, "new child holding the rest of the blocks"),
        "at": (_INT, "number of blocks left in node_id"),
    },
    "radix_evict": {
        "node_id": (_INT, "node removed from the tree (all its blocks evicted)"),
    },
    "radix_lock": {
        "node_id": (_INT, "the request's handle: it and every node above it gain one lock ref (no eviction)"),
        "request_id": (_STR + "?", "the request that uses the path"),
        "lock_ref": (_INT, "the handle's lock refs after the lock"),
    },
    "radix_unlock": {
        "node_id": (_INT, "the handle: it and every node above it lose one lock ref"),
        "request_id": (
            _STR + "?",
            "the request that stopped using the path (finished, preempted, edited, "
            "or moved its handle down the path)",
        ),
        "lock_ref": (_INT, "the handle's lock refs after the unlock"),
    },
    "radix_hit": {
        "node_id": (_INT, "node whose blocks a request reused"),
        "request_id": (_STR, "the request"),
        "blocks": (_INT, "number of its blocks reused"),
    },
    "prefix_match": {
        "request_id": (_STR, "the request"),
        "prompt_tokens": (_INT, "prompt length"),
        "matched_tokens": (_INT, "prompt tokens served from the cache"),
        "reason": (
            _STR,
            "why matching stopped: divergent | block_floor | evicted | salt | short_prompt | "
            "disabled | full_match | window | empty_cache | cache_end",
        ),
        "detail": (
            _DICT,
            "reason-specific facts: position, expected/actual token ids and texts, evicted_at, policy; window: "
            "matched_blocks (what the tree held), window_backoff, limiting_group (window_layout='paged')",
        ),
        "tiers": (
            _LIST + "?",
            "with host_blocks: the tier each matched block was found in (device | host | disk), in order",
        ),
    },
    "hit_rates": {
        "token_hit_rate": (_FLOAT, "hit tokens / prompt tokens that could match, cumulative"),
        "request_hit_rate": (_FLOAT, "requests with any hit / requests, cumulative"),
        "block_hit_rate": (_FLOAT, "block hits / block lookups, cumulative"),
        "window": (_DICT, "the same three over the last N requests, with n"),
        "tiers": (_DICT + "?", 'with host_blocks: tier -> {"hit_tokens"}, cumulative'),
    },
    # --- tiers below the device pool (EngineConfig(host_blocks=N)) -----------------------------------------
    "block_offloaded": {
        "hash": (_STR, "chained hash of the block (its whole prefix)"),
        "parent_hash": (_STR, "hash of the block before it (a root key for block 0)"),
        "src_tier": (_STR, "where it came from: device (evicted from the pool) | host (moved down to disk)"),
        "src": (_INT, "physical block (device) or slot it was copied from"),
        "tier": (_STR, "the tier it now lives in: host | disk"),
        "slot": (_INT, "its slot in that tier"),
        "logical": (_INT, "its position in the sequence, in blocks"),
        "token_ids": (_LIST, "token ids it holds"),
        "texts": (_LIST + "?", "decoded text of each token"),
    },
    "block_loaded": {
        "hash": (_STR, "chained hash of the block a prefix match found below the device"),
        "tier": (_STR, "the tier it was loaded from: host | disk"),
        "slot": (_INT, "its slot there, free again"),
        "physical": (_INT, "device block it was copied into (just allocated for the request)"),
        "request_id": (_STR, "the request whose match reached it"),
        "logical": (_INT, "its position in the sequence, in blocks"),
        "bytes": (_INT, "K/V bytes copied"),
    },
    "host_evicted": {
        "hash": (_STR, "chained hash of a block leaving a lower tier"),
        "tier": (_STR, "host | disk"),
        "slot": (_INT, "its slot, free again"),
        "reason": (
            _STR,
            "capacity (the tier's oldest, nothing below) | on_device (computed again on the device)",
        ),
    },
    # --- edits -----------------------------------------------------------------------------------------
    "edit": {
        "request_id": (_STR, "edited request"),
        "position": (_INT, "first edited position m"),
        "kind": (_STR, "replace | insert | delete"),
        "token_ids": (_LIST, "new token ids (empty for delete)"),
        "texts": (_LIST, "their text"),
        "num_deleted": (_INT, "tokens removed (replace/delete)"),
    },
    "invalidate": {
        "request_id": (_STR, "edited request"),
        "kept": (_LIST, "physical blocks kept whole (before m's block)"),
        "dropped": (_LIST, "physical blocks released (from m's block on, or after it)"),
        "copied": (_LIST, "[src, dst] pairs: m's block copied before its valid part was kept"),
        "first_recomputed": (_INT, "first position recomputed (m)"),
        "recompute_tokens": (_INT, "tokens to prefill again"),
        "status": (
            _STR + "?",
            "the request after the edit: running (recomputes next step) or waiting (queued; a "
            "finished request re-attaches its cached prefix at the edit)",
        ),
    },
    # --- sliding-window rings --------------------------------------------------------------------------
    "ring_write": {
        "request_id": (_STR, "owner of the ring"),
        "group": (_INT, "window layer group (layers sharing a window size)"),
        "window": (_INT, "W: slots in the ring"),
        "start": (_INT, "first position written"),
        "end": (_INT, "one past the last position written (slot = position mod W)"),
        "evicted": (_LIST, "positions overwritten (fell out of the window)"),
        # optional: "layers" (list, the group's layer indices), "sink_tokens" (int S: positions < S sit in
        # sink slots 0..S-1 and the ring proper is slots S + position mod W)
    },
    "ring_resume": {
        "request_id": (_STR, "request whose window-layer rings restart (edit, prefix hit, fork)"),
        "wanted": (_INT, "position the cache could otherwise resume at (edit point, prefix match)"),
        "position": (
            _INT,
            "exact restart point chosen: window layers need that layer's K/V of the W-1 positions before it",
        ),
        "source": (
            _STR,
            "ring (its own ring still holds them) | snapshot (saved at a block boundary) | start | "
            "fork (a copy of its parent's rings)",
        ),
        "recompute_tokens": (_INT, "wanted - position: extra tokens recomputed through all layers"),
        "reason": (_STR, "window when position < wanted, else none"),
    },
    "ring_kept": {
        "request_id": (_STR, "owner of a heavy-hitter cache (H2O: kvtui sinks --trace, the experiment only)"),
        "group": (_INT, "ring group"),
        "budget": (_INT, "slots: keys held at most, the newest included"),
        "recent": (_INT, "the newest `recent` positions are always kept; the others held are heavy hitters"),
        "end": (_INT, "one past the newest position: the cache as query end - 1 reads it"),
        "kept": (_LIST, "positions held, ascending (replaces the previous set: a key dropped never returns)"),
        "layer": (_INT + "?", "the layer this cache is (H2O keeps one per layer and KV head)"),
        "kv_head": (_INT + "?", "the KV head this cache is"),
    },
    "sink_divergence": {
        "request_id": (_STR, "finished request run with attention sinks (or a forced window)"),
        "max_logit_diff": (
            _FLOAT,
            "max |logit| difference vs a no-cache full-attention forward of its sequence",
        ),
        "positions": (
            _LIST,
            "positions whose logits were compared (each chunk's last, i.e. every sampled token)",
        ),
        "sink_tokens": (_INT, "S"),
        "window": (_INT, "W"),
        "argmax_changed": (_INT, "compared positions whose greedy token differs from full attention"),
    },
    # --- K/V precision (kvtui precision --trace) ---------------------------------------------------------
    "kv_divergence": {
        "request_id": (_STR, "request whose positions were compared"),
        "kv_dtype": (_STR, "the K/V precision compared with the exact cache (int8 | fp8_e4m3)"),
        "start": (_INT, "position of kl[0]"),
        "kl": (
            _LIST,
            "KL divergence (nats) of each position's next-token distribution from the exact cache's, "
            "positions start, start + 1, ...",
        ),
        "top1_changed": (
            _LIST,
            "positions among them whose most likely next token differs from the exact cache's",
        ),
    },
    # --- what-if runs (kvtui whatif -o) ------------------------------------------------------------------
    "whatif_summary": {
        "workload": (_STR, "the workload file the run replayed"),
        "format": (_STR, "trace | workload | mooncake | proxy-log"),
        "requests": (_INT, "requests in the workload"),
        "prompt_tokens": (_INT, "their prompt tokens"),
        "ceiling": (_FLOAT, "token hit rate of an infinite cache (simulated)"),
        "current": (_DICT, "this run's configuration: capacity_tokens, block_size, eviction"),
        "points": (_LIST, "kvtui whatif --json's points: capacity_tokens, method, token_hit_rate, misses"),
        "optimal": (_LIST, "Belady's bound: capacity_tokens, token_hit_rate"),
        "curve": (_LIST, "the one-pass LRU curve at log-spaced capacities: capacity_tokens, token_hit_rate"),
        "misses": (_DICT, "this run's missed prompt tokens by cause"),
        "fleet": (_DICT + "?", "with --workers: the fleet report"),
        "tiers": (
            _DICT + "?",
            "with --host-capacity: assumptions, trace_seconds, current, curve and surface per tier",
        ),
        "latency": (
            _DICT + "?",
            "with --latency or --calibrate: predicted against served TTFT and TPOT, per request and p50 / p95",
        ),
    },
    # --- the machine -----------------------------------------------------------------------------------
    "roofline": {
        "device": (_STR, "device the model runs on (cpu, cuda:0)"),
        "dtype": (_STR, "dtype of the weights and of the matmul measured"),
        "mem_bandwidth": (_FLOAT, "bytes/s of a large tensor copy on that device, measured at start"),
        "peak_flops": (_FLOAT, "FLOP/s of a square matmul in that dtype on that device, measured at start"),
        "weight_bytes": (_INT, "bytes of the weights one forward reads (a decode step's memory floor)"),
        "flops_per_token": (_INT, "2 x weights multiplied per token (a prefill token's compute cost)"),
        "threads": (_INT + "?", "CPU threads torch used"),
    },
}
