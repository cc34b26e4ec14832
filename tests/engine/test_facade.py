"""The engine's front door: the names a user imports, and a model that stays the user's own."""

import subprocess
import sys

import torch

from tests.helpers.tiny_models import random_prompts, tiny_model


def test_the_facade_names_import_from_the_package():
    from engine import Engine, EngineConfig, RequestOutput, SamplingParams

    assert Engine.__name__ == "Engine" and EngineConfig().block_size == 16
    assert SamplingParams(max_tokens=3).max_tokens == 3 and RequestOutput.__name__ == "RequestOutput"


def test_importing_the_trace_reader_does_not_import_torch():
    code = "import sys, engine, engine.trace; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_callers_model_generates_as_before_after_from_model():
    from engine import Engine, EngineConfig, SamplingParams

    model = tiny_model("llama-gqa")
    prompt = torch.tensor([random_prompts([12])[0]])
    before = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=6, do_sample=False)
    engine = Engine.from_model(model, config=EngineConfig(block_size=4, num_blocks=32))
    [out] = engine.generate([prompt[0].tolist()], SamplingParams(max_tokens=6))
    after = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=6, do_sample=False)
    assert after.tolist() == before.tolist()
    # and the engine agrees with it
    assert out.token_ids == before[0, 12:].tolist()
    assert model.config._attn_implementation != "kvtui_paged"
