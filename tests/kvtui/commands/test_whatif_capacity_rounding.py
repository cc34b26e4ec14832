"""`kvtui whatif --capacity`: a capacity that is not a whole number of blocks says what it became."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from kvtui.cli import main

TRACE = Path(__file__).resolve().parents[3] / "fixtures" / "traces" / "concurrent8.jsonl"


def test_a_capacity_rounded_down_to_whole_blocks_says_what_it_became():
    args = ["whatif", str(TRACE), "--capacity", "1k,4096", "--method", "simulated"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    line = "1k -> 992 tokens (62 blocks of 16)"
    assert line in result.stderr
    assert f"note      capacity {line}" in result.stdout
    # 4096 is 256 whole blocks: nothing to say
    assert "4096 ->" not in result.output
    report = json.loads(CliRunner().invoke(main, [*args, "--json", "-q"]).stdout)
    assert report["capacities_rounded"] == [
        {"asked": "1k", "capacity_tokens": 992, "block_size": 16, "kv_dtype": None}
    ]


def test_a_host_capacity_rounded_down_says_so_too():
    args = ["whatif", str(TRACE), "--capacity", "256", "--host-capacity", "1k", "--method", "simulated"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "capacity host 1k -> 992 tokens (62 blocks of 16): rounded down to whole blocks" in result.stderr
    assert "note      capacity host 1k -> 992 tokens (62 blocks of 16)" in result.stdout
