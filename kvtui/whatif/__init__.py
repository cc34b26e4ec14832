"""What if the cache were different: workloads replayed through the real `engine.core` manager and scheduler
with no model (no torch, no K/V memory), under other capacities, block sizes, policies or fleets.

    requests.py      the one request shape every workload becomes (ids, arrival, prompt, output, salt)
    loaders.py       reading a kvtui trace, a workload JSON or a proxy request log; format detection
    mooncake.py      reading a Mooncake-format JSONL (hash ids of 512-token blocks)
    bailian.py       reading a Qwen-Bailian JSONL (per-block hash ids of 16 tokens, read chained)
    stream.py        a hash-id file a line at a time into the one-pass curves; the progress bar
    block_trace.py   kvtui's binary block trace: columns of hash ids, its converter from JSONL
    block_stream.py  a block trace a chunk at a time into the one-pass curves
    anonymize.py     any workload as keyed hash ids that keep every shared prefix (--export-anonymized)
    capacity.py      `100k,3M,4096b,80GiB` into tokens
    cost.py          the stated cost model that turns steps into seconds
    causes.py        a cause for every missed prompt token
    simulate.py      one run: arrivals interleaved with engine steps, the engine's own decisions
    hash_keys.py     block keys of hash-id prompts made from their ids
    run_sink.py      the trace sink of a run that writes no trace (only the events it reads)
    routers.py       fleet routers (round robin, random, least loaded, Dynamo's kv-aware cost, longest prefix)
    fleet.py         N workers behind a router; duplication, reachable and achieved hit rates
    fleets.py        the fleets of a sweep: every router asked for, and one shared cache
    prefix_nodes.py  block keys into prefix-tree node ids, a request at a time (Belady's, Bailian's note)
    block_keys.py    the keys of a request's full prompt blocks at a block size
    block_table.py   block keys into prefix-tree node ids in numpy arrays, a batch at a time; prefix hashes
    curve.py         the one-pass LRU curve (Mattson stack distances)
    stack_pass.py    the curve's pass over compact arrays, a batch of requests at a time
    stack_kernel.py  the one pass's C loops (stack_runs.c, top_stack.c), built at first use
    sampled.py       the curve from a SHARDS sample of the blocks (--sample), with its standard error
    top_stack.py     the exact top of the stack beside a sample: the curve exact up to 256 / rate blocks
    heavy_blocks.py  the blocks many requests share, counted in a first pass and kept whole by the sample
    sample_ranges.py the sampled curve split by hash range, a task a range (--jobs, --ray), merged
    optimal.py       Belady's bound
    onepass.py       the bridge from a workload to the curve and the bound
    answers.py       --target: the smallest capacity for a share of the ceiling
    fidelity.py      the twin against the server's cached tokens
    timeline.py      a proxy log's requests through the cache manager on the server's recorded clock
    runs.py          one simulated configuration or fleet as a job
    jobs.py          jobs in this process, over local cores (--jobs) or on Ray (--ray)
    sweep.py         every configuration asked for, the ceiling, the answers and the fleets: one report
    report.py        the table and the --json object
    as_recorded.py   a kvtui engine trace run again at the engine's settings (--as-recorded)
    synth.py         a Mooncake-shaped workload
    synth_stream.py  the same at 10^8 or 10^9 block references, written as it is made
    labels.py        token labels for a trace `kvtui whatif -o` wrote, whose token ids are made up
"""
