"""The stated cost of a hit in a lower tier: loading a token's K/V from host memory or disk against computing
it again, so that a tiered point says how many prefill seconds it saves against the device-only run.

    load seconds per token    = KV bytes per token / the tier's bandwidth
    compute seconds per token = 2 x parameters / the GPU's achieved FLOP/s
    seconds saved             = host tokens x (compute - load from host) + disk tokens x (compute - load from disk)

The device-only run at the same device capacity hits exactly the tiered run's device tokens (an exclusive
LRU hierarchy keeps the most recent blocks on the device), so the host and disk tokens are the ones it
computes again. Defaults (order of magnitude, each an option): host 50 GB/s (PCIe 5.0 x16 at about 80% of
its 64 GB/s), disk 5 GB/s (one NVMe drive's sequential read), 400 TFLOP/s (an H100 at about 40% of its
989 TFLOP/s dense bf16). Left out: attention's FLOPs, which grow with the context (so recomputing long
prompts costs more than this), and overlap of loading with compute (layer by layer, as LMCache does, would
hide part of a load). A negative saving means loading from that tier is slower than computing again.
"""

from __future__ import annotations

from dataclasses import dataclass

HOST_GBPS = 50.0
DISK_GBPS = 5.0
GPU_TFLOPS = 400.0
DAY_SECONDS = 86_400.0
# model types whose MLP has two matrices (up, down); the others are gated (gate, up, down)
PLAIN_MLP = {"gpt2", "gpt_neox", "gptj", "opt", "falcon", "bloom", "phi", "starcoder2", "gpt_bigcode"}
_EXPERT_FIELDS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")


class ParametersError(ValueError):
    """The config does not say the model's parameters; the message says what to give instead."""


def parameters_from_config(config: dict) -> int:
    """Non-embedding parameters of a dense transformer (attention and MLP weights of every layer): what a
    prefill token multiplies through. The embedding is a lookup, and the LM head runs for the last token only."""
    if isinstance(config.get("text_config"), dict):
        config = {**config["text_config"], "model_type": config["text_config"].get("model_type", "")}
    if any(config.get(k) for k in _EXPERT_FIELDS):
        raise ParametersError(
            "a mixture-of-experts config: give --model-params with the active parameters per token"
        )
    from engine.models.kv_budget import _field, shape_from_config

    shape = shape_from_config(config)
    hidden = _field(config, "hidden_size")
    inner = config.get("intermediate_size") or config.get("n_inner") or config.get("ffn_dim")
    model_type = config.get("model_type", "")
    if inner is None and model_type == "gpt2" and hidden:
        inner = 4 * hidden
    if not hidden or not inner:
        raise ParametersError("the config has no hidden_size and intermediate_size: give --model-params")
    attention = hidden * shape.q_heads * shape.head_dim * 2 + hidden * shape.kv_heads * shape.head_dim * 2
    mlp = (2 if model_type in PLAIN_MLP else 3) * hidden * inner
    return shape.layers * (attention + mlp)


@dataclass(frozen=True)
class TierCost:
    # None: no --kv-config (load seconds unknown) / no parameters (compute seconds unknown)
    bytes_per_token: float | None = None
    parameters: float | None = None
    host_bandwidth: float = HOST_GBPS * 1e9
    disk_bandwidth: float = DISK_GBPS * 1e9
    flops: float = GPU_TFLOPS * 1e12
    # dollars per GPU-hour; None: no money figures
    gpu_hour_cost: float | None = None

    @property
    def priced(self) -> bool:
        """Both sides of the trade are known: seconds saved can be said."""
        return bool(self.bytes_per_token) and bool(self.parameters)

    def compute_seconds_per_token(self) -> float | None:
        return 2 * self.parameters / self.flops if self.parameters else None

    def load_seconds_per_token(self, tier: str) -> float | None:
        """Seconds to bring one token's K/V (every layer) back to the device from `tier`."""
        if not self.bytes_per_token or tier == "device":
            return None if not self.bytes_per_token else 0.0
        bandwidth = self.host_bandwidth if tier == "host" else self.disk_bandwidth
        return self.bytes_per_token / bandwidth

    def seconds_saved(self, host_tokens: int, disk_tokens: int) -> float | None:
        """Prefill seconds the tiered run saves against the device-only run (None: not priced)."""
        if not self.priced:
            return None
        compute = self.compute_seconds_per_token()
        return host_tokens * (compute - self.load_seconds_per_token("host")) + disk_tokens * (
            compute - self.load_seconds_per_token("disk")
        )

    def per_day(self, seconds: float | None, trace_seconds: float) -> dict:
        """GPU-hours (and money) per day of trace: the saving scaled from the trace's span to 24 hours."""
        if seconds is None or trace_seconds <= 0:
            return {"gpu_hours_per_day": None, "cost_per_day": None}
        hours = seconds / 3600 * DAY_SECONDS / trace_seconds
        cost = None if self.gpu_hour_cost is None else hours * self.gpu_hour_cost
        return {"gpu_hours_per_day": hours, "cost_per_day": cost}

    def as_dict(self) -> dict:
        return {
            "bytes_per_token": self.bytes_per_token,
            "parameters": self.parameters,
            "host_bandwidth_bytes_per_s": self.host_bandwidth,
            "disk_bandwidth_bytes_per_s": self.disk_bandwidth,
            "gpu_flops": self.flops,
            "gpu_hour_cost": self.gpu_hour_cost,
            "compute_seconds_per_token": self.compute_seconds_per_token(),
            "host_load_seconds_per_token": self.load_seconds_per_token("host"),
            "disk_load_seconds_per_token": self.load_seconds_per_token("disk"),
        }

    def describe(self) -> list[str]:
        """The assumptions, each with the option that changes it."""
        lines = [
            f"tiers: load = KV bytes per token / bandwidth (host {self.host_bandwidth / 1e9:g} GB/s "
            f"--host-bandwidth, disk {self.disk_bandwidth / 1e9:g} GB/s --disk-bandwidth), not overlapped "
            f"with compute; recompute = 2 x parameters FLOPs per token at {self.flops / 1e12:g} TFLOP/s "
            "(--gpu-tflops), attention's FLOPs left out"
        ]
        if self.priced:
            compute = self.compute_seconds_per_token()
            lines.append(
                f"tiers: {self.bytes_per_token:,.0f} B per token (--kv-config), {self.parameters / 1e9:.3g}B "
                f"parameters: compute {compute * 1e6:.3g} us a token, load {self.load_seconds_per_token('host') * 1e6:.3g} "
                f"us from host, {self.load_seconds_per_token('disk') * 1e6:.3g} us from disk; seconds saved are "
                "against the device-only run at the same device capacity"
            )
        else:
            missing = [
                name
                for name, given in (
                    ("--kv-config (bytes per token)", self.bytes_per_token),
                    (
                        "the model's parameters (--kv-config with intermediate_size, or --model-params)",
                        self.parameters,
                    ),
                )
                if not given
            ]
            lines.append("tiers: no seconds saved without " + " and ".join(missing))
        if self.gpu_hour_cost is not None:
            lines.append(
                f"tiers: ${self.gpu_hour_cost:g} per GPU-hour (--gpu-hour-cost); per day = scaled from the trace's span"
            )
        return lines
