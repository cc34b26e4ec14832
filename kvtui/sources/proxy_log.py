"""The proxy's request log, read back: what a request line says on the terminal, the lines the attach app's
requests tab takes as the log grows (tab 4; kvtui/state/proxy_requests.py holds them), and the attached view the
proxy explains against (under one lock: the attach thread folds while the proxy's loop reads)."""

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
    if record.get("predicted_at_admission") is not None:
        mark = "" if record.get("agrees_at_admission") in (True, None) else " (DISAGREES)"
        line += f", {record['predicted_at_admission']} at its admission{mark}"
        if record.get("admitted") is not None and record.get("forwarded") is not None:
            queued = max(0.0, record["admitted"] - record["forwarded"])
            line += f" (queued; its admission step ended {queued * 1000:.0f} ms after it was forwarded)"
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


def tail_offset(path: str, max_bytes: int) -> int:
    """Where to start reading a log for its last lines: 0 for a file of at most `max_bytes`, else the start of
    the first whole line within its last `max_bytes` (a long-running proxy's log grows to gigabytes, and the
    requests tab keeps only the latest few hundred)."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            if size <= max_bytes:
                return 0
            # from the byte before the window: a line that starts exactly at the window is kept whole
            f.seek(size - max_bytes - 1)
            f.readline()
            return f.tell()
    except OSError:
        return 0
