"""`kvtui whatif`'s cost clock: what a step, a prefill token and a decode row cost, and `--latency` /
`--calibrate`, which set a proxy log's served TTFT and TPOT against the clock's (kvtui/whatif/latency_fit.py)."""

from __future__ import annotations

import click

from kvtui.whatif.cost import CostModel

COST = CostModel()

_OPTIONS = [
    click.option("--latency", is_flag=True, help="A proxy log: predicted against served TTFT and TPOT."),
    click.option(
        "--calibrate", is_flag=True, help="A proxy log: fit the costs to its TTFT and TPOT, then --latency."
    ),
    click.option(
        "--step-ms",
        type=click.FloatRange(min=0),
        default=COST.per_step * 1e3,
        show_default=True,
        help="Cost model: ms per step.",
    ),
    click.option(
        "--prefill-us",
        type=click.FloatRange(min=0),
        default=COST.per_prefill_token * 1e6,
        show_default=True,
        help="Cost model: us per prefill token.",
    ),
    click.option(
        "--decode-ms",
        type=click.FloatRange(min=0),
        default=COST.per_decode_row * 1e3,
        show_default=True,
        help="Cost model: ms per decode row.",
    ),
]


def cost_options(command):
    """Add the cost clock's options to `command` (keywords latency, calibrate, step_ms, prefill_us, decode_ms)."""
    for option in reversed(_OPTIONS):
        command = option(command)
    return command
