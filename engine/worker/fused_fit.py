"""Whether a model's steps can run fused (engine/worker/fused_forward.py): its layers must be exactly a Llama
layer, paged in every layer, with nothing hooked into the modules whose forwards the fused path does not call.

The fused path calls no module's forward, so a hook on a module is not seen there. The runner checks what it
can check once per step in one look (a global forward hook); a hook or a replaced forward on a module is
declared: `ModelRunner.through_modules(reason)` sends every step through the modules while it is in force
(kvtui precision does, for the hooks it puts on the decoder layers)."""

from __future__ import annotations

import torch
from torch.nn.modules import module as torch_module

from engine.worker.kernels import decode_ops

# causal LMs whose decoder layer is: norm, attention (q/k/v/o, rotary), residual, norm, gated MLP, residual
ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM")
LAYER_MODULES = {"self_attn", "mlp", "input_layernorm", "post_attention_layernorm"}
ATTENTION_MODULES = {"q_proj", "k_proj", "v_proj", "o_proj"}


def decoder_layers(model) -> list:
    """The layers the model's own forward runs (it stops at config.num_hidden_layers)."""
    return list(model.model.layers[: model.config.num_hidden_layers])


def _native_window(model, attention) -> int | None:
    # the window the module passes its attention: Qwen2's per layer, Mistral's from the config
    if hasattr(attention, "sliding_window"):
        return attention.sliding_window
    return (
        getattr(model.config, "sliding_window", None)
        if type(model).__name__ == "MistralForCausalLM"
        else None
    )


def why_not(model, windows: tuple[int | None, ...], paged_layers: int) -> str:
    """Why the fused path cannot run this model ('' when it can)."""
    if type(model).__name__ not in ARCHITECTURES:
        return f"{type(model).__name__} is not one of {', '.join(ARCHITECTURES)}"
    if not decode_ops.available():
        return f"no decode_ops kernel: {decode_ops.why_not()}"
    if any(p.device.type != "cpu" or p.dtype != torch.float32 for p in model.parameters()):
        return "not a float32 CPU model"
    if any(w is not None for w in windows) or paged_layers != len(windows):
        return "a layer attends through a window"
    layers = decoder_layers(model)
    if len(layers) != len(windows):
        return f"the model runs {len(layers)} layers, its K/V has {len(windows)}"
    for index, layer in enumerate(layers):
        attention, mlp = layer.self_attn, layer.mlp
        if getattr(attention, "layer_idx", None) != index:
            return f"layer {index} reads the K/V of layer {getattr(attention, 'layer_idx', None)}"
        if _native_window(model, attention) is not None:
            return "a layer attends through a window"
        linears = [getattr(attention, f"{n}_proj", None) for n in "qkvo"]
        linears += [getattr(mlp, f"{n}_proj", None) for n in ("gate", "up", "down")]
        if any(type(m) is not torch.nn.Linear for m in linears):
            return "a layer's projections are not plain linears"
        # q_norm / k_norm (Qwen3), extra norms (Gemma): another layer
        children = set(dict(layer.named_children())), set(dict(attention.named_children()))
        if children != (LAYER_MODULES, ATTENTION_MODULES):
            return "a layer has modules beyond a Llama layer's"
        if any(hasattr(m, "_hf_hook") for m in layer.modules()):
            return "accelerate hooks move the weights"
    return ""


def intercepted() -> str:
    """What a fused step would skip now that one look sees ('' when nothing): a global forward hook or pre-hook."""
    if torch_module._global_forward_hooks or torch_module._global_forward_pre_hooks:
        return "a global forward hook"
    return ""
