"""`kvtui bench decode --kv-dtype`: 8-bit K/V against float32 K/V on one model, a row per context and precision."""

from __future__ import annotations

from click.testing import CliRunner

from kvtui.cli import main


def test_decode_with_8_bit_k_v_beside_the_exact_cache():
    args = ["bench", "decode", "-m", "random:llama:tiny", "--kv-dtype", "fp8"]
    result = CliRunner().invoke(main, [*args, "--contexts", "40,70", "--steps", "2", "--repeats", "2"])
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.stdout.splitlines() if line.strip()[:2] in ("40", "70")]
    # context, batch, precision, ms, min ms, tok/s, GB, speed
    assert [(r[0], r[1], r[2]) for r in rows] == [
        ("40", "1", "float32"),
        ("40", "1", "fp8_e4m3"),
        ("70", "1", "float32"),
        ("70", "1", "fp8_e4m3"),
    ]
    assert rows[0][-1] == "1.00x" and float(rows[1][-1].rstrip("x")) > 0
    assert "round 2/2" in result.stderr
