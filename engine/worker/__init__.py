"""Torch: the model runner and everything that touches K/V tensors (vLLM's v1/worker).

runner.py          ModelRunner: applies the manager's pending copies, builds one flat forward, samples
batch.py           what one forward's attention reads (segments, masks, ring plans)
paged_kv.py        PagedKV: the block pool's K/V slab; BlockTables on the device
ring_tensors.py    RingTensors: window layers' ring rows and snapshots as tensors
attention.py, sdpa.py   the paged attention registered with transformers
kernels/           C kernels for the CPU (decode attention in place), built once per machine, called by ctypes
decode_runs.py     torch's batch decode where no kernel can be built: runs of blocks read in place, the rest gathered
packed_linear.py   oneDNN-packed float32 weights for forwards of a few rows
sampling.py        greedy and temperature / top-k / top-p sampling
sinks.py           how far attention sinks move the logits (sink_divergence)
"""
