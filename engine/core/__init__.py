"""Torch-free bookkeeping of the KV cache (vLLM's v1/core): block ids, never tensors.

blocks.py          BlockPool: free list, ref counts, copy-on-write decisions (recorded, applied by the worker)
hashing.py         chained block hashes
radix.py           RadixCache: the prefix tree, locks; tree_node.py its Node; eviction.py the policies
prefix_cache.py    the PrefixCache interface, and NoPrefixCache (prefix caching off)
tails.py           partly filled last blocks of finished sequences
miss_explainer.py  PrefixMatch: what a prompt found and why matching stopped
edits.py           an edit's new sequence and the plan of which blocks stay
rings.py           window layers' ring bookkeeping: rows, heads, snapshot keys (tensors: worker/ring_tensors.py)
kv_cache.py        KVCacheManager: the one front door for the scheduler and the engine
engine_core.py     EngineCore: the requests and a step's bookkeeping, shared by the engine and kvtui's what-if
quiet_rows.py      plain decode rows and decode-only runs taken in bulk (a core with no model)
forks.py           a fork's request
scheduler.py       continuous batching, chunked prefill, preemption
request.py         Request, SamplingParams, RequestOutput
"""
