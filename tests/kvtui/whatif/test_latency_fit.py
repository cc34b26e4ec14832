"""The cost model calibrated from a log: a log whose TTFT and TPOT were made on the cost clock with known costs
gives those costs back, and its predicted latency then matches the served one; the least squares holds a
cost that would go negative at 0."""

from __future__ import annotations

import json
import random
from dataclasses import replace

from click.testing import CliRunner

from kvtui.cli import main
from kvtui.whatif.cost import CostModel
from kvtui.whatif.latency_fit import least_squares, percentile, timed_run
from kvtui.whatif.requests import SimRequest
from kvtui.whatif.simulate import SimConfig

BLOCK, BLOCKS, BUDGET = 16, 64, 512
KNOWN = CostModel(per_step=0.012, per_prefill_token=300e-6, per_decode_row=0.7e-3)


def workload(seed: int = 3) -> list[SimRequest]:
    """Requests sharing a few heads: some alone on the server (one decode row), then a burst that queues and
    batches (many rows), so that the cost per step and per row are told apart."""
    rng = random.Random(seed)
    heads = [[rng.randrange(1, 30000) for _ in range(rng.randrange(40, 200))] for _ in range(4)]
    out = []
    for i in range(40):
        t = 2.0 * i if i < 10 else 20.0 + 0.01 * i
        prompt = rng.choice(heads) + [rng.randrange(1, 30000) for _ in range(rng.randrange(5, 150))]
        n = rng.randrange(2, 40)
        output = [rng.randrange(1, 30000) for _ in range(n)]
        out.append(SimRequest(f"r{i}", t, prompt, output, n))
    return out


def simulated_log(tmp_path, cost: CostModel):
    """The workload's proxy log, its TTFT and TPOT from a run on `cost`."""
    requests = workload()
    config = SimConfig(BLOCK * BLOCKS, BLOCK, partial_hits=False, max_batched_tokens=BUDGET, cost=cost)
    w = timed_run(requests, config)
    lines = []
    for r in requests:
        f, last = w.first[r.request_id], w.last[r.request_id]
        n = len(r.output_token_ids)
        lines.append(
            {
                "request_id": r.request_id,
                "forwarded": 1000.0 + r.arrival,
                "prompt_token_ids": r.prompt,
                "output_token_ids": r.output_token_ids,
                "stream": True,
                "ttft": w.ends[f] - r.arrival,
                "tpot": (w.ends[last] - w.ends[f]) / (n - 1),
                "server": {"block_size": BLOCK, "num_gpu_blocks": BLOCKS, "enable_prefix_caching": True},
            }
        )
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def whatif(path, *args) -> dict:
    result = CliRunner().invoke(
        main, ["whatif", str(path), "--json", "-q", "--max-batched-tokens", str(BUDGET), *args]
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.output)["latency"]


def test_the_fit_recovers_known_costs_from_a_log_simulated_with_them(tmp_path):
    latency = whatif(simulated_log(tmp_path, KNOWN), "--calibrate")
    fitted = latency["calibration"]
    assert abs(fitted["per_step"] / KNOWN.per_step - 1) < 0.01
    assert abs(fitted["per_prefill_token"] / KNOWN.per_prefill_token - 1) < 0.01
    assert abs(fitted["per_decode_row"] / KNOWN.per_decode_row - 1) < 0.01
    for name in ("ttft", "tpot"):
        assert abs(latency[name]["error"]["p50"]) < 0.01 and abs(latency[name]["error"]["p95"]) < 0.01
    assert latency["requests"] == 40


def test_the_stated_costs_are_checked_against_the_served_latency(tmp_path):
    """Twice the step cost the log was made with: the prediction says so (every step slower)."""
    path = simulated_log(tmp_path, KNOWN)
    exact = whatif(path, "--latency", "--step-ms", "12", "--prefill-us", "300", "--decode-ms", "0.7")
    assert abs(exact["ttft"]["error"]["p50"]) < 1e-6 and abs(exact["tpot"]["error"]["p50"]) < 1e-6
    slow = whatif(path, "--latency", "--step-ms", "24", "--prefill-us", "300", "--decode-ms", "0.7")
    assert slow["ttft"]["error"]["p50"] > 0.05 and slow["tpot"]["error"]["p50"] > 0.2
    assert "calibration" not in slow


def test_a_cost_that_would_go_negative_is_held_at_zero():
    # values made by 2 x steps + 0 x tokens, with a little noise that pulls the token cost below 0
    rows = [(1.0, 10.0, 0.0), (2.0, 5.0, 0.0), (3.0, 1.0, 0.0), (1.0, 0.0, 4.0)]
    values = [1.99, 4.0, 6.02, 2.0 + 4 * 0.5]
    a, b, c = least_squares(rows, values)
    assert b == 0.0 and abs(a - 2.0) < 0.02 and abs(c - 0.5) < 0.02


def test_percentiles_are_linear_between_ranks():
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    assert percentile([1.0, 2.0], 95) == 1.95
    assert percentile([], 50) == 0.0


def test_a_run_keeps_its_steps():
    config = SimConfig(BLOCK * BLOCKS, BLOCK, partial_hits=False, max_batched_tokens=BUDGET, cost=KNOWN)
    w = timed_run(workload()[:5], replace(config))
    assert len(w.starts) == len(w.ends) == len(w.prefill) == len(w.decode)
    assert all(e > s for s, e in zip(w.starts, w.ends))
    assert set(w.first) == {f"r{i}" for i in range(5)}


def test_other_capacities_are_predicted_on_the_same_costs(tmp_path):
    """Four times the pool: the burst waits less for blocks, on the costs the log was made with."""
    path = simulated_log(tmp_path, KNOWN)
    costs = ["--step-ms", "12", "--prefill-us", "300", "--decode-ms", "0.7"]
    latency = whatif(path, "--latency", "--capacity", f"{BLOCK * BLOCKS},{4 * BLOCK * BLOCKS}", *costs)
    (at,) = latency["at"]
    assert (at["capacity_tokens"], at["block_size"]) == (4 * BLOCK * BLOCKS, BLOCK)
    assert at["ttft"]["p95"] < latency["ttft"]["predicted"]["p95"]
