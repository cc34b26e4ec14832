"""Torch: the model runner and everything that touches K/V tensors (vLLM's v1/worker).

runner.py          ModelRunner: applies the manager's pending copies, builds one flat forward, samples
batch.py           what one forward's attention reads (segments, masks, ring plans)
paged_kv.py        PagedKV: the block pool's K/V slab; BlockTables on the device
ring_tensors.py    RingTensors: window layers' ring rows and snapshots as tensors
attention.py, sdpa.py   the paged attention registered with transformers
run_plan.py        RunPlan: which implementation runs each operation, chosen once per device and dtype
kernels/           C kernels for the CPU (decode attention in place, linears, norms, rotary), built once per machine
packed_linear.py   a CPU float32 model's linears through the C panel kernel inside the engine's forwards
fused_forward.py   a Llama-family step in a few C calls per layer (fused_fit.py: which models it fits)
sampling.py        greedy and temperature / top-k / top-p sampling
sinks.py           how far attention sinks move the logits (sink_divergence)
machine_probe.py   this machine's roofline for a loaded model (the trace's `roofline` event)
"""
