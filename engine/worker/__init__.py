"""Torch: the model runner and everything that touches K/V tensors (vLLM's v1/worker).

runner.py          ModelRunner: applies the manager's pending copies, builds one flat forward, samples
batch.py           what one forward's attention reads (segments, masks, ring plans)
paged_kv.py        PagedKV: the block pool's K/V slab; BlockTables on the device
ring_tensors.py    RingTensors: window layers' ring rows and snapshots as tensors
attention.py, sdpa.py   the paged attention registered with transformers
sampling.py        greedy and temperature / top-k / top-p sampling
sinks.py           how far attention sinks move the logits (sink_divergence)
"""
