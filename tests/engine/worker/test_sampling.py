import pytest
import torch

from engine.engine import Engine, SamplingParams
from engine.worker.sampling import make_generator, sample
from tests.helpers.tiny_models import random_prompts, tiny_model


def test_greedy_is_argmax_and_top_k_one_is_greedy():
    logits = torch.tensor([0.1, 3.0, 2.9, -1.0])
    assert sample(logits, SamplingParams(), None) == 1
    params = SamplingParams(temperature=1.5, top_k=1, seed=0)
    assert all(sample(logits, params, make_generator(params)) == 1 for _ in range(20))


def test_top_p_keeps_only_the_nucleus():
    logits = torch.log(torch.tensor([0.6, 0.3, 0.05, 0.05]))
    params = SamplingParams(temperature=1.0, top_p=0.8, seed=1)
    generator = make_generator(params)
    assert {sample(logits, params, generator) for _ in range(200)} == {0, 1}


def test_seed_makes_sampling_reproducible():
    model = tiny_model("llama-gqa")
    params = SamplingParams(max_tokens=12, temperature=1.0, top_p=0.9, seed=7)
    prompt = random_prompts([9])[0]
    runs = [Engine.from_model(model).generate([prompt], params)[0].token_ids for _ in range(2)]
    assert runs[0] == runs[1]
    other = Engine.from_model(model).generate(
        [prompt], SamplingParams(max_tokens=12, temperature=1.0, seed=8)
    )
    assert other[0].token_ids != runs[0]


def test_stop_ids_and_eos_end_a_request():
    model = tiny_model("llama-gqa")
    prompt = random_prompts([6])[0]
    full = Engine.from_model(model).generate([prompt], SamplingParams(max_tokens=10))[0]
    stop = full.token_ids[3]
    first = full.token_ids.index(stop)
    out = Engine.from_model(model).generate([prompt], SamplingParams(max_tokens=10, stop_token_ids=[stop]))[0]
    assert out.token_ids == full.token_ids[: first + 1] and out.finish_reason == "stop"
    model.generation_config.eos_token_id = stop
    eos = Engine.from_model(model).generate([prompt], SamplingParams(max_tokens=10))[0]
    assert eos.finish_reason == "eos" and eos.token_ids == full.token_ids[: first + 1]
    ignored = Engine.from_model(model).generate([prompt], SamplingParams(max_tokens=10, ignore_eos=True))[0]
    assert ignored.token_ids == full.token_ids and ignored.finish_reason == "length"


@pytest.mark.parametrize("bad", [dict(max_tokens=0), dict(temperature=-1), dict(top_p=0), dict(top_k=-2)])
def test_bad_sampling_params_are_rejected(bad):
    with pytest.raises(ValueError):
        SamplingParams(**bad)
