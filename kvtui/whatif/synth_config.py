"""The shape of synth.py's Mooncake-like workload (its docstring says what it is shaped after), shared with the
streamed generator (synth_stream.py)."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass


@dataclass(frozen=True)
class MooncakeLikeConfig:
    requests: int = 12_031
    duration_ms: int = 3_600_000
    block_size: int = 512
    max_prompt_tokens: int = 131_072
    # blocks of the system prompt every request starts with
    global_prompt_blocks: int = 1
    # application prompts: count, Zipf exponent, and blocks each (uniform in the range)
    apps: int = 40
    app_zipf: float = 1.1
    app_blocks: tuple[int, int] = (1, 8)
    # turns per session: geometric with this mean
    mean_turns: float = 1.8
    # seconds between a session's turns: exponential with this mean
    mean_gap_s: float = 120.0
    # log-normal message sizes in tokens: (median, sigma)
    first_message: tuple[float, float] = (5_000.0, 1.0)
    next_message: tuple[float, float] = (900.0, 1.1)
    output: tuple[float, float] = (250.0, 0.8)
    max_output: int = 4_096


def _lognormal(rng: random.Random, median_sigma: tuple[float, float]) -> int:
    median, sigma = median_sigma
    return max(1, int(rng.lognormvariate(math.log(median), sigma)))
