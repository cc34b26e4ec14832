"""engine/worker/machine_probe.py: the machine's roofline for a loaded model, measured into one trace event."""

from __future__ import annotations

import torch

from engine.engine import Engine, EngineConfig
from engine.trace.schema import validate_event
from engine.worker.machine_probe import emit_roofline, model_weights
from tests.helpers.tiny_models import tiny_model


def test_weights_count_a_tied_embedding_once_and_skip_an_untied_input_embedding():
    tied = tiny_model("llama-gqa", tie_word_embeddings=True)
    untied = tiny_model("llama-gqa", tie_word_embeddings=False)
    total = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731 (parameters() dedups tied weights)
    emb = tied.get_input_embeddings().weight.numel()
    assert model_weights(tied) == (4 * total(tied), total(tied))
    assert model_weights(untied) == (4 * (total(untied) - emb), total(untied) - emb)


def test_the_engine_trace_carries_one_measured_roofline_event():
    engine = Engine.from_model(tiny_model(), config=EngineConfig(device="cpu", num_blocks=16))
    events = []
    engine.trace.listeners.append(events.append)
    emit_roofline(engine)
    (ev,) = events
    assert validate_event(ev) is None
    # measured: any machine beats 100 MB/s, MFLOP/s
    assert ev["mem_bandwidth"] > 1e8 and ev["peak_flops"] > 1e8
    assert ev["weight_bytes"] == model_weights(engine.model)[0] and ev["threads"] == torch.get_num_threads()
