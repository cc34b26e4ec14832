"""`kvtui whatif`'s tier options: --host-capacity and --disk-capacity (an exclusive LRU hierarchy below the
device), and the stated cost model that prices a hit below the device (kvtui/whatif/tier_cost.py)."""

from __future__ import annotations

import click

from kvtui.whatif.tier_cost import DISK_GBPS, GPU_TFLOPS, HOST_GBPS

TIER_OPTIONS = (
    "host_capacities",
    "disk_capacities",
    "host_bandwidth",
    "disk_bandwidth",
    "gpu_tflops",
    "model_params",
    "gpu_hour_cost",
)
# the options that only price tiers: each needs --host-capacity
_COST_OPTIONS = {
    "host_bandwidth": "--host-bandwidth",
    "disk_bandwidth": "--disk-bandwidth",
    "gpu_tflops": "--gpu-tflops",
    "model_params": "--model-params",
    "gpu_hour_cost": "--gpu-hour-cost",
}
_PARAM_SUFFIX = {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}


def tier_options(command):
    """Add the tier options to `command` (they reach it as keyword arguments named in TIER_OPTIONS)."""
    positive = click.FloatRange(min=0, min_open=True)
    options = [
        click.option(
            "--host-capacity",
            "host_capacities",
            help="Host memory below the device, a list in --capacity's units: each point reports its token hit "
            "rate per tier (device, host, disk) and the prefill seconds the tier saves; every device x host "
            "pair from one pass.",
        ),
        click.option(
            "--disk-capacity",
            "disk_capacities",
            help="Disk below the host (what the host evicts), a list in --capacity's units; needs --host-capacity.",
        ),
        click.option(
            "--host-bandwidth",
            type=positive,
            help=f"GB/s loading K/V from host to device [default: {HOST_GBPS:g}, PCIe 5.0 x16 as achieved].",
        ),
        click.option(
            "--disk-bandwidth",
            type=positive,
            help=f"GB/s loading K/V from disk [default: {DISK_GBPS:g}, one NVMe drive].",
        ),
        click.option(
            "--gpu-tflops",
            type=positive,
            help=f"Achieved prefill TFLOP/s, the price of computing a token again [default: {GPU_TFLOPS:g}, an "
            "H100 at about 40% of peak].",
        ),
        click.option(
            "--model-params",
            help="Parameters a prefill token multiplies through (8B, 70e9; a mixture of experts: the active ones) "
            "[default: counted from --kv-config's layers].",
        ),
        click.option(
            "--gpu-hour-cost",
            type=click.FloatRange(min=0),
            help="Dollars per GPU-hour: the tiers' saving in money per day of trace.",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def parse_params(text: str) -> float:
    """`8B`, `500M`, `7.2e9` into a parameter count."""
    raw = text.strip()
    suffix = raw[-1:].lower() if raw[-1:].isalpha() and raw[-1:].lower() != "e" else ""
    try:
        value = float(raw[: len(raw) - len(suffix)]) * _PARAM_SUFFIX[suffix]
    except (ValueError, KeyError):
        raise click.BadParameter(
            f"{text!r}: write a parameter count as 8B, 500M or 7.2e9", param_hint="--model-params"
        ) from None
    if value <= 0:
        raise click.BadParameter(f"{text!r}: a model has more than 0 parameters", param_hint="--model-params")
    return value


def tiers_from_options(args: dict, sizes: list[int], bytes_per_token, kv_config, workers: int, quiet=True):
    """The TierOptions the sweep takes (None without --host-capacity), every option checked first."""
    from kvtui.whatif.capacity import CapacityError, capacities_of
    from kvtui.whatif.tier_cost import ParametersError, TierCost, parameters_from_config
    from kvtui.whatif.tiers import TierOptions

    hosts, disks = args["host_capacities"], args["disk_capacities"]
    if not hosts:
        if disks:
            raise click.BadParameter(
                "the disk holds what the host evicts: give --host-capacity too", param_hint="--disk-capacity"
            )
        given = [name for key, name in _COST_OPTIONS.items() if args[key] is not None]
        if given:
            raise click.BadParameter(
                "prices the tiers below the device: give --host-capacity too", param_hint=given[0]
            )
        return None
    if workers > 1:
        raise click.BadParameter(
            "tiers are for one worker: leave out --workers", param_hint="--host-capacity"
        )
    parameters = parse_params(args["model_params"]) if args["model_params"] else None
    if parameters is None and kv_config:
        from engine.models.kv_budget import load_config

        try:
            parameters = parameters_from_config(load_config(kv_config)[0])
        except ParametersError:
            parameters = None
    cost = TierCost(
        bytes_per_token=bytes_per_token,
        parameters=parameters,
        host_bandwidth=(args["host_bandwidth"] or HOST_GBPS) * 1e9,
        disk_bandwidth=(args["disk_bandwidth"] or DISK_GBPS) * 1e9,
        flops=(args["gpu_tflops"] or GPU_TFLOPS) * 1e12,
        gpu_hour_cost=args["gpu_hour_cost"],
    )
    if args["gpu_hour_cost"] is not None and not cost.priced:
        raise click.BadParameter(
            "prices the seconds saved, which need the K/V bytes per token (--kv-config) and the parameters "
            "(--kv-config with intermediate_size, or --model-params)",
            param_hint="--gpu-hour-cost",
        )
    per_size_hosts, per_size_disks = {}, {}
    # the host and disk capacities rounded down to whole blocks (the report's capacities_rounded)
    rounded: list[dict] = []
    for name, text, out in (
        ("--host-capacity", hosts, per_size_hosts),
        ("--disk-capacity", disks, per_size_disks),
    ):
        if text is None:
            continue
        try:
            for bs in sizes:
                parsed = capacities_of(text, bs, bytes_per_token)
                out[bs] = [c.tokens for c in parsed]
                rounded += [
                    {
                        "tier": name.removeprefix("--").removesuffix("-capacity"),
                        "asked": c.asked.strip(),
                        "capacity_tokens": c.tokens,
                        "block_size": bs,
                        "kv_dtype": None,
                    }
                    for c in parsed
                    if c.rounded
                ]
        except CapacityError as exc:
            raise click.BadParameter(str(exc), param_hint=name) from None
        if not out[sizes[0]]:
            raise click.BadParameter(f"{text!r}: give at least one capacity", param_hint=name)
    if not per_size_disks:
        per_size_disks = {bs: [0] for bs in sizes}
    if not quiet:
        from kvtui.commands.whatif_helpers import note_rounded

        note_rounded(rounded)
    return TierOptions(per_size_hosts, per_size_disks, cost, tuple(rounded))
