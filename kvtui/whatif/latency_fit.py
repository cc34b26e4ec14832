"""Latency on the cost clock: the cost model (cost.py) calibrated from a log's served TTFT and TPOT, and the
requests' predicted TTFT and TPOT set against the served ones.

    step seconds = per_step + per_prefill_token x prefill tokens + per_decode_row x decode rows

The log's requests run through the simulator's engine core (simulate.py) one step at a time, each step's
prefill tokens and decode rows kept. A request's TTFT is then the sum of the step costs from its arrival to
the step that gave its first token (the step in flight at its arrival for the part after it), and its TPOT the
mean cost of the steps after that one up to its last token: both linear in the three costs, so a least-squares
fit over every request's served TTFT and TPOT (each relative to its served value, costs not below 0) gives the
costs that explain them best. Which requests share a step depends on the costs, so the run and the fit are
repeated until the costs settle. Torch-free.

    {"calibration": {"per_step", "per_prefill_token", "per_decode_row", "runs"} (with --calibrate),
     "cost": the costs the prediction used, "requests": how many,
     "ttft" / "tpot": {"served": {"p50", "p95"}, "predicted": {"p50", "p95"}, "error": {"p50", "p95"}},
     "per_request": [{"request_id", "ttft": [served, predicted], "tpot": [served, predicted]}],
     "at": [{"capacity_tokens", "block_size", "ttft": {"p50", "p95"}, "tpot": {...}}]: the other capacities
     and block sizes asked for, predicted on the same costs}

`error` is predicted / served - 1 at each percentile.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, replace

from kvtui.whatif.causes import MissLedger
from kvtui.whatif.cost import CostModel
from kvtui.whatif.simulate import Worker, paused_gc

# a fit that moves no cost by more than this (relative) has settled
SETTLED = 1e-4
ROUNDS = 25
# a round moves a cost by at most this factor down
FLOOR = 100.0


@dataclass
class Served:
    """A request's served latency from the log (seconds; None where the log cannot say)."""

    ttft: float | None
    tpot: float | None


def served_latency(requests) -> dict[str, Served]:
    """TTFT and TPOT as the proxy recorded them: a stream's first token (`timeline`) and its pace."""
    out = {}
    for r in requests:
        if r.timeline is None or r.timeline[0] is None:
            continue
        first, end = r.timeline
        n = len(r.output_token_ids or ())
        out[r.request_id] = Served(first, (end - first) / (n - 1) if n > 1 else None)
    return out


class TimedWorker(Worker):
    """The simulator's worker, every step taken through the scheduler and kept: (start, end, prefill tokens,
    decode rows), and each request's first and last token steps."""

    def __init__(self, config):
        super().__init__(config, MissLedger(config.block_size), False, fast_forward=False)
        self.starts: list[float] = []
        self.ends: list[float] = []
        self.prefill: list[int] = []
        self.decode: list[int] = []
        self.first: dict[str, int] = {}
        self.last: dict[str, int] = {}

    def step(self, quiet=()) -> None:
        scheduled = self.core.schedule()
        if scheduled is None:
            return
        requests = [c.request for c in scheduled.chunks]
        before = [len(r.output_token_ids) for r in requests]
        tokens, rows = scheduled.num_prefill_tokens, scheduled.num_decode
        k = len(self.starts)
        self.starts.append(self.now)
        self.now += self.config.cost.step_seconds(tokens, rows)
        self.ends.append(self.now)
        self.prefill.append(tokens)
        self.decode.append(rows)
        self.manager.pool.take_copies()
        self.core.update_from_output(scheduled, self.tokens.token_for, self.tokens.take)
        self.manager.rings.take_pending()
        for r, n in zip(requests, before):
            if len(r.output_token_ids) > n:
                self.first.setdefault(r.request_id, k)
                self.last[r.request_id] = k


def timed_run(requests, config) -> TimedWorker:
    worker = TimedWorker(config)
    with paused_gc():
        try:
            for item in requests:
                worker.advance_to(item.arrival)
                worker.add(item)
            worker.drain()
        finally:
            worker.close()
    return worker


class StepSums:
    """Prefix sums of a run's steps: (steps, prefill tokens, decode rows) over any span, and the features of a
    request's TTFT and TPOT."""

    def __init__(self, w: TimedWorker):
        self.w = w
        self.sums = [(0.0, 0.0, 0.0)]
        for p, d in zip(w.prefill, w.decode):
            s = self.sums[-1]
            self.sums.append((s[0] + 1, s[1] + p, s[2] + d))

    def span(self, a: int, b: int) -> tuple[float, float, float]:
        """Steps a..b-1."""
        x, y = self.sums[b], self.sums[a]
        return (x[0] - y[0], x[1] - y[1], x[2] - y[2])

    def ttft(self, arrival: float, first: int) -> tuple[float, float, float]:
        w = self.w
        # the first step that ends after the arrival (in flight, or the next)
        g = bisect.bisect_right(w.ends, arrival)
        whole = self.span(g + 1, first + 1)
        rho = 1.0
        if w.starts[g] < arrival:
            rho = (w.ends[g] - arrival) / (w.ends[g] - w.starts[g])
        return (whole[0] + rho, whole[1] + rho * w.prefill[g], whole[2] + rho * w.decode[g])

    def tpot(self, first: int, last: int, n: int) -> tuple[float, float, float]:
        s = self.span(first + 1, last + 1)
        return (s[0] / (n - 1), s[1] / (n - 1), s[2] / (n - 1))


def predicted(requests, config) -> dict[str, tuple[float | None, float | None]]:
    """Each request's TTFT and TPOT on the cost clock of `config`."""
    w = timed_run(requests, config)
    out = {}
    for r in requests:
        if r.request_id not in w.first:
            continue
        f, last = w.first[r.request_id], w.last[r.request_id]
        n = r.num_output_tokens
        out[r.request_id] = (w.ends[f] - r.arrival, (w.ends[last] - w.ends[f]) / (n - 1) if n > 1 else None)
    return out


def calibrate(requests, config, served: dict[str, Served]) -> tuple[CostModel, int]:
    """The costs that best explain the served TTFT and TPOT, and the simulated runs it took: least-squares
    rounds (each fit on the last run's steps, half way to it), then a simplex search (Nelder-Mead, on the
    logarithms of the costs) of the error each run makes itself, from the best so far."""
    runs = 0
    best = (math.inf, _costs(config.cost))

    def run(theta: tuple) -> tuple[list, list, float]:
        nonlocal runs, best
        runs += 1
        w = timed_run(requests, replace(config, cost=_with(config.cost, theta)))
        sums = StepSums(w)
        rows, values, error = [], [], 0.0
        for r in requests:
            s = served.get(r.request_id)
            if s is None or r.request_id not in w.first:
                continue
            f, last = w.first[r.request_id], w.last[r.request_id]
            n = r.num_output_tokens
            if s.ttft:
                rows.append(sums.ttft(r.arrival, f))
                values.append(s.ttft)
                error += ((w.ends[f] - r.arrival) / s.ttft - 1) ** 2
            if s.tpot and n > 1:
                rows.append(sums.tpot(f, last, n))
                values.append(s.tpot)
                error += ((w.ends[last] - w.ends[f]) / (n - 1) / s.tpot - 1) ** 2
        error /= max(len(values), 1)
        best = min(best, (error, theta))
        return rows, values, error

    theta = best[1]
    for _ in range(ROUNDS):
        rows, values, _ = run(theta)
        if not rows:
            return config.cost, runs
        fit = least_squares(rows, values)
        moved = max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(fit, theta))
        # half way (geometrically) from the costs the run used: a run on costs far off batches otherwise,
        # and the next fit swings back
        theta = tuple(math.sqrt(max(x, y / FLOOR) * y) if y > 0 else x for x, y in zip(fit, theta))
        if moved < SETTLED:
            # the costs explain the steps they make: a fixed point
            run(fit)
            return _with(config.cost, fit), runs
    theta = _simplex(lambda t: run(t)[2], best[1])
    return _with(config.cost, min(best, (run(theta)[2], theta))[1]), runs


def _costs(cost: CostModel) -> tuple[float, float, float]:
    return (cost.per_step, cost.per_prefill_token, cost.per_decode_row)


def _with(cost: CostModel, theta: tuple) -> CostModel:
    return replace(cost, per_step=theta[0], per_prefill_token=theta[1], per_decode_row=theta[2])


def _simplex(error, start: tuple, iterations: int = 60, tolerance: float = 1e-3) -> tuple:
    """Nelder-Mead over the logarithms of the positive costs (a cost at 0 stays there)."""
    free = [i for i, x in enumerate(start) if x > 0]
    if not free:
        return start

    def at(point: list[float]) -> tuple:
        theta = list(start)
        for i, x in zip(free, point):
            theta[i] = math.exp(x)
        return tuple(theta)

    x0 = [math.log(start[i]) for i in free]
    simplex = [x0] + [[x + (0.1 if k == j else 0.0) for k, x in enumerate(x0)] for j in range(len(x0))]
    scored = sorted((error(at(p)), p) for p in simplex)
    for _ in range(iterations):
        if scored[-1][0] - scored[0][0] <= tolerance * scored[0][0]:
            break
        worst = scored[-1][1]
        centre = [sum(p[k] for _, p in scored[:-1]) / (len(scored) - 1) for k in range(len(x0))]
        reflected = _towards(centre, worst, 1.0)
        e_r = error(at(reflected))
        if e_r < scored[0][0]:
            expanded = _towards(centre, worst, 2.0)
            e_e = error(at(expanded))
            scored[-1] = (e_e, expanded) if e_e < e_r else (e_r, reflected)
        elif e_r < scored[-2][0]:
            scored[-1] = (e_r, reflected)
        else:
            contracted = _towards(centre, worst, -0.5)
            e_c = error(at(contracted))
            if e_c < scored[-1][0]:
                scored[-1] = (e_c, contracted)
            else:
                b = scored[0][1]
                scored = [scored[0]] + [
                    (error(at(q)), q) for q in ([(x + y) / 2 for x, y in zip(b, p)] for _, p in scored[1:])
                ]
        scored.sort()
    return at(scored[0][1])


def _towards(centre: list[float], worst: list[float], f: float) -> list[float]:
    return [c + f * (c - w) for c, w in zip(centre, worst)]


def least_squares(rows: list[tuple], values: list[float]) -> tuple[float, ...]:
    """x >= 0 minimising sum ((row . x) / value - 1)^2: the normal equations, a negative cost held at 0."""
    free = [0, 1, 2]
    while True:
        x = [0.0, 0.0, 0.0]
        solved = _solve(
            [[sum(r[i] * r[j] / v / v for r, v in zip(rows, values)) for j in free] for i in free],
            [sum(r[i] / v for r, v in zip(rows, values)) for i in free],
        )
        for i, value in zip(free, solved):
            x[i] = value
        negative = [i for i in free if x[i] < 0]
        if not negative:
            return tuple(x)
        free.remove(min(negative, key=lambda i: x[i]))
        if not free:
            return (0.0, 0.0, 0.0)


def _solve(a: list[list[float]], b: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting; a singular system leaves its free unknowns at 0."""
    n = len(b)
    m = [row[:] + [rhs] for row, rhs in zip(a, b)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) < 1e-300:
            continue
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(n):
            if r != col and m[r][col]:
                f = m[r][col] / m[col][col]
                m[r] = [x - f * y for x, y in zip(m[r], m[col])]
    return [m[i][n] / m[i][i] if abs(m[i][i]) > 1e-300 else 0.0 for i in range(n)]


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100), linear between closest ranks."""
    xs = sorted(values)
    if not xs:
        return 0.0
    pos = (len(xs) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def latency_section(requests, configs: list, calibrate_first: bool) -> dict | None:
    """Predicted against served TTFT and TPOT at the first of `configs` (the server's settings; with
    `calibrate_first`: on costs fitted to this log), and the predicted TTFT and TPOT at the others."""
    config = configs[0]
    served = served_latency(requests)
    if not served:
        return None
    out: dict = {}
    if calibrate_first:
        cost, runs = calibrate(requests, config, served)
        config = replace(config, cost=cost)
        out["calibration"] = {
            "per_step": cost.per_step,
            "per_prefill_token": cost.per_prefill_token,
            "per_decode_row": cost.per_decode_row,
            "runs": runs,
        }
    guess = predicted(requests, config)
    out["cost"] = config.cost.describe()
    rows = []
    for rid, s in served.items():
        if rid in guess:
            rows.append({"request_id": rid, "ttft": [s.ttft, guess[rid][0]], "tpot": [s.tpot, guess[rid][1]]})
    out["requests"] = len(rows)
    for name in ("ttft", "tpot"):
        pairs = [row[name] for row in rows if row[name][0] is not None and row[name][1] is not None]
        figures = {}
        for side, k in (("served", 0), ("predicted", 1)):
            values = [p[k] for p in pairs]
            figures[side] = {"p50": percentile(values, 50), "p95": percentile(values, 95)}
        figures["error"] = {
            q: (figures["predicted"][q] / figures["served"][q] - 1) if figures["served"][q] else 0.0
            for q in ("p50", "p95")
        }
        out[name] = figures
    out["per_request"] = rows
    out["at"] = []
    for other in configs[1:]:
        guess = predicted(requests, replace(other, cost=config.cost))
        at = {"capacity_tokens": other.capacity_tokens, "block_size": other.block_size}
        for k, name in enumerate(("ttft", "tpot")):
            values = [g[k] for g in guess.values() if g[k] is not None]
            at[name] = {"p50": percentile(values, 50), "p95": percentile(values, 95)}
        out["at"].append(at)
    return out


def latency_lines(report: dict) -> list[str]:
    lat = report.get("latency")
    if not lat:
        return []
    lines = [""]
    cal = lat.get("calibration")
    if cal:
        lines.append(
            f"latency   calibrated on this log ({cal['runs']} simulated runs): --step-ms {cal['per_step'] * 1e3:.6g} "
            f"--prefill-us {cal['per_prefill_token'] * 1e6:.6g} --decode-ms {cal['per_decode_row'] * 1e3:.6g}"
        )
    else:
        lines.append(f"latency   on the stated cost model: {lat['cost']}")
    for name, label in (("ttft", "TTFT"), ("tpot", "TPOT")):
        f = lat[name]
        lines.append(
            f"          {label} p50 served {f['served']['p50'] * 1e3:.1f} ms, predicted "
            f"{f['predicted']['p50'] * 1e3:.1f} ({f['error']['p50']:+.1%}); p95 served "
            f"{f['served']['p95'] * 1e3:.1f} ms, predicted {f['predicted']['p95'] * 1e3:.1f} "
            f"({f['error']['p95']:+.1%}); {lat['requests']} requests"
        )
    for at in lat.get("at", ()):
        t, p = at["ttft"], at["tpot"]
        lines.append(
            f"          at {at['capacity_tokens']:,} tokens, block {at['block_size']}: TTFT p50 "
            f"{t['p50'] * 1e3:.1f} ms, p95 {t['p95'] * 1e3:.1f}; TPOT p50 {p['p50'] * 1e3:.1f} ms, "
            f"p95 {p['p95'] * 1e3:.1f} (predicted)"
        )
    return lines
