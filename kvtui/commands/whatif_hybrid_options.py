"""`kvtui whatif`'s hybrid-model options: the KV-cache groups (from `--kv-config` or a proxy log's server
settings) and `--prefix-match-unit`, put into every configuration of the sweep."""

from __future__ import annotations

from dataclasses import replace

import click


def hybrid_options(command):
    """Add `--prefix-match-unit` to `command` (it reaches it as the keyword `prefix_match_unit`)."""
    return click.option(
        "--prefix-match-unit",
        type=click.IntRange(min=1),
        default=None,
        help="Hits only in multiples of N tokens, and a Mamba-style group's state cached only at multiples of "
        "N (vLLM's prefix_match_unit) [the block size]. With --kv-config's groups or a proxy log's.",
    )(command)


def hybrid_configs(
    configs: list, loaded, kv_config: str | None, unit: int | None, method: str, kv_dtype=None
):
    """The configurations with the model's groups, and the method to run (a hybrid model runs simulated
    only). Unchanged when no group is hybrid and no unit is asked."""
    from engine.models.kv_groups import KVGroup
    from kvtui.whatif.hybrid_groups import (
        describe,
        groups_from_config,
        groups_from_server,
        is_hybrid,
        layer_bytes_per_token,
    )

    layer_bytes = None
    try:
        groups = groups_from_server(getattr(loaded, "server", None))
        if kv_config:
            from engine.models.kv_budget import ConfigError, load_config

            try:
                config = load_config(kv_config)[0]
            except ConfigError as exc:
                raise click.ClickException(str(exc)) from None
            groups = groups_from_config(config)
            layer_bytes = layer_bytes_per_token(config, kv_dtype) if kv_dtype else None
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    unit = unit or (getattr(loaded, "server", None) or {}).get("prefix_match_unit")
    if not is_hybrid(groups) and not unit:
        return configs, method
    if unit and any(unit % c.block_size for c in configs):
        raise click.ClickException(
            f"--prefix-match-unit {unit} is not a multiple of every block size asked "
            f"({', '.join(str(c.block_size) for c in configs)}): give a multiple of them"
        )
    if method == "one-pass":
        raise click.ClickException(
            "the one-pass curve models one full-attention group and cannot stay exact for KV-cache groups that "
            "share a pool or a match unit: use --method simulated"
        )
    groups = tuple(groups) or (KVGroup(),)
    loaded.notes.append(describe(list(groups), unit, configs[0].block_size, layer_bytes))
    from kvtui.whatif.timeline import on_the_clock

    if on_the_clock(loaded.requests) is None:
        loaded.notes.append(
            "the groups run without the server's clock (no answers' times in this workload): one request after "
            "another, each admitted, decoded and freed before the next"
        )
    if method == "both":
        loaded.notes.append(
            "the one-pass curve is left out: it models one full-attention group, not groups sharing a pool"
        )
    return [replace(c, kv_groups=groups, prefix_match_unit=unit) for c in configs], "simulated"
