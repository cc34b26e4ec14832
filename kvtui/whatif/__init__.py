"""What if the cache were different: workloads replayed through the real `engine.core` manager and scheduler
with no model (no torch, no K/V memory), under other capacities, block sizes, policies or fleets.

    requests.py   the one request shape every workload becomes (ids, arrival, prompt, output, salt)
    loaders.py    reading a kvtui trace, a workload JSON or a proxy request log; format detection
    mooncake.py   reading a Mooncake-format JSONL (hash ids of 512-token blocks)
    capacity.py   `100k,3M,4096b,80GiB` into tokens
    cost.py       the stated cost model that turns steps into seconds
    causes.py     a cause for every missed prompt token
    simulate.py   one run: arrivals interleaved with engine steps, the engine's own decisions
    routers.py    fleet routers (round robin, random, least loaded, Dynamo's kv-aware cost)
    fleet.py      N workers behind a router; duplication, regret, the global-cache comparison
    onepass.py    the bridge to the one-pass LRU curve (curve.py) and the Belady bound (optimal.py)
    sweep.py      every configuration asked for, the ceiling and the fleet: one report (`kvtui whatif`)
    report.py     the table and the --json object
"""
