"""The proxy's request log, read back: what a request line says on the terminal, the attach app's requests tab
(tab 4, read as the log grows), and the attached view the proxy explains against (under one lock: the attach
thread folds while the proxy's loop reads)."""

from __future__ import annotations

import json
import threading


def summary_line(record: dict) -> str:
    n = len(record.get("prompt_token_ids") or [])
    cached = record.get("cached_tokens")
    line = f"{record['request_id']} {record['endpoint']} {n} prompt tokens, vLLM cached {cached}"
    if "predicted_cached" in record:
        mark = (
            ""
            if record.get("agrees") in (True, None)
            else "  DISAGREES: kvtui's picture is wrong or incomplete"
        )
        line += f", kvtui predicted {record['predicted_cached']}{mark}"
    if record.get("ttft") is not None:
        line += f"; TTFT {record['ttft'] * 1000:.0f} ms"
    if record.get("tpot") is not None:
        line += f", TPOT {record['tpot'] * 1000:.1f} ms"
    return line


class LockedFleet:
    """A FleetState folded by the attach thread and read by the proxy's loop, under one lock."""

    def __init__(self, fleet):
        self.fleet = fleet
        self.lock = threading.Lock()

    def fold(self, events) -> None:
        with self.lock:
            self.fleet.apply_all(events)

    def explain(self, ids, options) -> list[dict]:
        from kvtui.state.fleet_explain import explain_prompt

        with self.lock:
            return explain_prompt(self.fleet, ids, **options)


# ------------------------------------------------------------------------------------------------ reading the log
def read_log(path: str, offset: int = 0) -> tuple[list[dict], int]:
    """Records appended to a proxy log since `offset` (whole lines only), and the offset after them."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return [], offset
    end = data.rfind(b"\n") + 1
    out = []
    for line in data[:end].splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out, offset + end


def request_rows(records: list[dict]) -> list[str]:
    """The attach app's requests tab: one line per request, newest last, with its explanation."""
    if not records:
        return ["no request yet (kvtui proxy --log LOG writes them; attach --requests LOG reads them)"]
    t0 = records[0].get("arrival", 0.0)
    head = f"{'request':<10} {'at s':>7} {'prompt':>6} {'vLLM cached':>11} {'kvtui':>6} {'TTFT ms':>8} {'TPOT ms':>8}  why"
    lines = [head]
    for r in records:
        ttft = "-" if r.get("ttft") is None else f"{r['ttft'] * 1000:.0f}"
        tpot = "-" if r.get("tpot") is None else f"{r['tpot'] * 1000:.1f}"
        predicted = r.get("predicted_cached")
        mark = "" if r.get("agrees") in (True, None) else " DISAGREES"
        lines.append(
            f"{r.get('request_id', '?')[:10]:<10} {r.get('arrival', 0.0) - t0:>7.2f} "
            f"{len(r.get('prompt_token_ids') or []):>6} {r.get('cached_tokens')!s:>11} {predicted!s:>6} "
            f"{ttft:>8} {tpot:>8}  {r.get('explain', '')}{mark}"
        )
    return lines
