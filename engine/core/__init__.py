"""Torch-free bookkeeping of the KV cache (vLLM's v1/core): block ids, never tensors.

blocks.py          BlockPool: free list, ref counts, copy-on-write decisions (recorded, applied by the worker)
hashing.py         chained block hashes
radix.py           RadixCache: the prefix tree, locks; tree_node.py its Node
eviction.py        the eviction policies, and the tree's eviction side (TreeEviction)
prefix_cache.py    the PrefixCache interface, NoPrefixCache (prefix caching off) and RadixPrefixCache
tails.py           partly filled last blocks of finished sequences
tiers.py           LowerTiers: host (and disk) block slots below the device pool
tiered_cache.py    TieredPrefixCache: the prefix cache with the tiers below it (demote, match on, load)
miss_explainer.py  PrefixMatch: what a prompt found and why matching stopped
edits.py           an edit's new sequence
edit_cuts.py       where an edit cuts a block table (planned, then applied by the manager)
rings.py           window layers' ring bookkeeping: rows, heads, snapshot keys (tensors: worker/ring_tensors.py)
kv_cache.py        KVCacheManager: the one front door for the scheduler and the engine
engine_core.py     EngineCore: the requests and a step's bookkeeping, shared by the engine and kvtui's what-if
quiet_rows.py      quiet decode rows: found (scan), set aside in a step, or taken as a decode run (a core with no model)
forks.py           a fork's request
scheduler.py       continuous batching, chunked prefill, preemption; the step's plan (ScheduledStep)
request.py         Request, SamplingParams, RequestOutput
"""
