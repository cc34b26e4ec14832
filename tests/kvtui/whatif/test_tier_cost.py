"""kvtui/whatif/tier_cost.py: loading a token's K/V from a tier against computing it again, by hand; the
parameters counted from a config against a published count; what is not priced says why."""

from __future__ import annotations

import pytest

from kvtui.whatif.tier_cost import ParametersError, TierCost, parameters_from_config

LLAMA_3_8B = {
    "model_type": "llama",
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "vocab_size": 128256,
}


def test_llama_3_8b_has_its_published_parameters_less_the_embeddings():
    # 8,030,261,248 in all: less the untied embedding and LM head (2 x 128256 x 4096) and the 65 norms' weights
    # (two a layer and the last, 4096 each), which multiply nothing
    assert parameters_from_config(LLAMA_3_8B) == 8_030_261_248 - 2 * 128256 * 4096 - 65 * 4096


def test_a_plain_mlp_has_two_matrices_and_gpt2_a_default_width():
    gpt2 = {"model_type": "gpt2", "n_layer": 12, "n_head": 12, "n_embd": 768}
    # GPT-2 small: 85M in its blocks (124M less 38.6M of token and 0.8M of position embeddings), biases and
    # norms aside
    assert parameters_from_config(gpt2) == 12 * (4 * 768 * 768 + 2 * 768 * 3072)


def test_what_the_config_cannot_say_is_asked_for():
    with pytest.raises(ParametersError, match="--model-params"):
        parameters_from_config({**LLAMA_3_8B, "num_local_experts": 8})
    no_mlp = {k: v for k, v in LLAMA_3_8B.items() if k != "intermediate_size"}
    with pytest.raises(ParametersError, match="intermediate_size"):
        parameters_from_config(no_mlp)


def test_seconds_saved_by_hand():
    cost = TierCost(bytes_per_token=2e5, parameters=5e9, host_bandwidth=2e10, disk_bandwidth=2e9, flops=1e14)
    # compute 2 x 5e9 / 1e14 = 100 us; load 10 us from host, 100 us from disk
    assert cost.compute_seconds_per_token() == pytest.approx(1e-4)
    assert cost.load_seconds_per_token("host") == pytest.approx(1e-5)
    assert cost.load_seconds_per_token("disk") == pytest.approx(1e-4)
    assert cost.seconds_saved(1000, 0) == pytest.approx(0.09)
    # disk loads as slowly as computing again: nothing saved
    assert cost.seconds_saved(0, 1000) == pytest.approx(0.0)
    slow_disk = TierCost(bytes_per_token=2e5, parameters=5e9, disk_bandwidth=1e9, flops=1e14)
    assert slow_disk.seconds_saved(0, 1000) == pytest.approx(-0.1)


def test_per_day_scales_the_trace_span_and_prices_gpu_hours():
    cost = TierCost(bytes_per_token=1, parameters=1, gpu_hour_cost=3.0)
    day = cost.per_day(7200.0, trace_seconds=43_200.0)
    # 2 GPU-hours in half a day: 4 a day, $12
    assert day == {"gpu_hours_per_day": pytest.approx(4.0), "cost_per_day": pytest.approx(12.0)}
    assert cost.per_day(7200.0, 0.0) == {"gpu_hours_per_day": None, "cost_per_day": None}
    assert TierCost(bytes_per_token=1, parameters=1).per_day(3600.0, 86_400.0)["cost_per_day"] is None


def test_unpriced_says_which_input_is_missing():
    assert TierCost(parameters=1e9).seconds_saved(10, 10) is None
    text = " ".join(TierCost(parameters=1e9).describe())
    assert "--kv-config (bytes per token)" in text and "--model-params" not in text
    text = " ".join(TierCost(bytes_per_token=1000).describe())
    assert "--model-params" in text and "(bytes per token)" not in text
    text = " ".join(TierCost(bytes_per_token=1000, parameters=1e9).describe())
    assert (
        "50 GB/s --host-bandwidth" in text and "400 TFLOP/s (--gpu-tflops)" in text and "5 us a token" in text
    )
