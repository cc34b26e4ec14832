"""The parts of `kvtui whatif` (whatif_commands.py) around the sweep: option parsing, the streamed one-pass
path, the server's settings from a proxy log as defaults, and --as-recorded."""

from __future__ import annotations

import json

import click

# a -o trace of more requests than this is too big to replay: a slice is asked for
LARGE_TRACE_REQUESTS = 2000


def _ints(text: str, name: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(
            f"{text!r}: a comma-separated list of whole numbers", param_hint=name
        ) from None
    if not values or min(values) < 1:
        raise click.BadParameter(f"{text!r}: give numbers of at least 1", param_hint=name)
    return values


def checked_choices(router: str, target_text: str | None, jobs: int, evictions: str):
    """(routers, targets, eviction policies) from their options, each refused in one line where it names
    something kvtui does not know."""
    from kvtui.whatif.answers import parse_targets
    from kvtui.whatif.routers import ROUTERS

    routers = [r.strip() for r in router.split(",") if r.strip()]
    for name in routers or [router]:
        if name not in ROUTERS:
            raise click.BadParameter(f"{name!r}: choose from {', '.join(ROUTERS)}", param_hint="--router")
    try:
        targets = parse_targets(target_text) if target_text else []
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--target") from None
    if jobs < 1:
        raise click.BadParameter(f"{jobs}: give at least 1", param_hint="--jobs")
    policies = [p.strip() for p in evictions.split(",") if p.strip()]
    for p in policies:
        if p not in ("lru", "lfu", "cost"):
            raise click.BadParameter(f"{p!r}: choose lru, lfu or cost", param_hint="--eviction")
    return routers, targets, policies


def _slice(text: str | None) -> tuple[int | None, int | None]:
    if not text:
        return None, None
    try:
        a, b = text.split(":")
        return (int(a) if a else None), (int(b) if b else None)
    except ValueError:
        raise click.BadParameter(
            f"{text!r}: write A:B (request indices, arrival order)", param_hint="--requests"
        ) from None


def tokenizer_option(ctx, param, value: str | None) -> str | None:
    """--tokenizer: a packaged model's name, or a path that exists."""
    from pathlib import Path

    from engine.models.packaged import PACKAGED

    if value is None or value in PACKAGED or Path(value).exists():
        return value
    raise click.BadParameter(
        f"{value!r} does not exist: give {', '.join(PACKAGED)}, a model directory or a tokenizer.json"
    )


def server_defaults(loaded, server: dict, block_sizes, capacities, whole_blocks):
    """--block-size, --capacity and --whole-blocks default to the server's settings when the log recorded them
    (a `kvtui proxy` log of vLLM): its block size, its pool, whole blocks."""
    if server.get("block_size") and not block_sizes:
        block_sizes = str(server["block_size"])
    if server.get("num_gpu_blocks") and not capacities:
        capacities = f"{server['num_gpu_blocks']}b"
    if whole_blocks is None:
        whole_blocks = bool(server)
    if server:
        loaded.notes.append(
            f"the server's settings from the log: block {server.get('block_size')}, "
            f"{server.get('num_gpu_blocks')} blocks, prefix caching "
            f"{'on' if server.get('enable_prefix_caching', True) else 'off'}; replayed at them in whole blocks "
            "unless --block-size, --capacity or --partial-blocks say otherwise"
        )
    return block_sizes, capacities or "1M", whole_blocks


def check_readable(path: str) -> None:
    """A zstd-compressed workload needs the zstandard package: said before any other work."""
    from engine.trace.compressed import missing_package

    if missing := missing_package(path):
        raise click.ClickException(missing)


def _streamable(fmt: str) -> bool:
    from kvtui.whatif.stream import STREAMED_FORMATS

    return fmt in STREAMED_FORMATS


def _stream(
    path,
    fmt,
    trace_block_size,
    block_sizes,
    start,
    stop,
    quiet,
    sample=None,
    seed=0,
    optimal=None,
    jobs=1,
    ray_address=None,
):
    """The one-pass curves straight from the file, a line or a chunk at a time (None when it is not in
    arrival order); Belady's chains only where its bound will be computed. A sample with --jobs N or --ray
    splits the block space into N hash ranges, one task each (sample_ranges.py)."""
    import os

    from kvtui.whatif.stream import FileProgress, OutOfOrder, one_pass_file
    from kvtui.whatif.sweep import OPTIMAL_AUTO_REFERENCES

    sizes = _ints(block_sizes, "--block-size") if block_sizes else [trace_block_size]
    if sample is not None and sample < 1 and (jobs > 1 or ray_address):
        return _ranged(
            path, fmt, trace_block_size, sizes, start, stop, quiet, sample, seed, jobs, ray_address
        )
    progress = FileProgress("one-pass, streaming the file", os.path.getsize(path), enabled=not quiet)
    try:
        limit = None if optimal else OPTIMAL_AUTO_REFERENCES
        keep = optimal is not False
        return one_pass_file(
            path, sizes, trace_block_size, start, stop, keep, progress, fmt, sample, seed, limit
        )
    except OutOfOrder as exc:
        if not quiet:
            click.echo(f"{exc}: reading it whole to sort it", err=True)
        return None, None


def _ranged(path, fmt, trace_block_size, sizes, start, stop, quiet, sample, seed, jobs, ray_address):
    from kvtui.whatif.jobs import JobsError
    from kvtui.whatif.sample_ranges import RangeSpec, ranged_passes
    from kvtui.whatif.stream import OutOfOrder

    spec = RangeSpec(str(path), fmt, tuple(sizes), trace_block_size, sample, seed, jobs, start, stop)
    where = f"on Ray ({ray_address})" if ray_address else "on this machine's cores"
    if not quiet:
        click.echo(f"  one-pass, sampled: {jobs} hash ranges {where}, each reading the file", err=True)
    try:
        return ranged_passes(spec, jobs, ray_address)
    except JobsError as exc:
        raise click.ClickException(str(exc)) from None
    except OutOfOrder as exc:
        raise click.ClickException(f"{exc}: hash ranges read the file in order; sort it first") from None


def file_block_size(fmt: str, path: str, trace_block_size: int) -> int:
    """Tokens per hash id: Qwen-Bailian's fixed 16, a block trace's own header, else --trace-block-size."""
    if fmt == "bailian":
        from kvtui.whatif.bailian import BLOCK

        return BLOCK
    if fmt == "blocks":
        from kvtui.whatif.block_trace import block_size_of

        try:
            return block_size_of(path)
        except ValueError as exc:
            raise click.ClickException(str(exc)) from None
    return trace_block_size


def check_sample(sample, method: str, optimal) -> None:
    """--sample estimates the one-pass curve; it has no meaning for a simulation or Belady's bound."""
    if sample is None:
        return
    if method != "one-pass":
        raise click.UsageError("--sample samples the one-pass curve: give --method one-pass")
    if optimal:
        raise click.UsageError("--optimal needs every block reference: leave out --sample")


def check_trace_out(loaded, workers: int, ray_address, method: str, request_slice) -> None:
    """-o writes one simulated run of one worker on this machine, small enough to replay."""
    if workers > 1:
        raise click.ClickException("-o writes one worker's run: leave out --workers")
    if ray_address:
        raise click.ClickException("-o writes the trace on this machine: leave out --ray")
    if method == "one-pass":
        raise click.ClickException("-o writes the simulated run: use --method simulated or both")
    if loaded.num_requests > LARGE_TRACE_REQUESTS and not request_slice:
        raise click.ClickException(
            f"{loaded.num_requests:,} requests make a trace too big to replay: write a "
            f"slice with --requests A:B (up to {LARGE_TRACE_REQUESTS} requests)"
        )


def given_options(ctx: click.Context) -> dict[str, str]:
    """The options given on the command line: parameter name -> the option as written (--capacity)."""
    from click.core import ParameterSource

    return {
        p.name: p.opts[0]
        for p in ctx.command.params
        if isinstance(p, click.Option) and ctx.get_parameter_source(p.name) is ParameterSource.COMMANDLINE
    }


# what --as-recorded reads: the trace (its own settings), how to print, and where to write the re-run
AS_RECORDED_OPTIONS = {"as_recorded", "as_json", "quiet", "trace_out"}
# options that only a fleet (--workers 2 or more) reads
FLEET_OPTIONS = ("router", "overlap_weight", "router_temperature")


def refuse_ignored(ctx: click.Context, workers: int) -> None:
    """An option that would do nothing in this combination is refused with one line."""
    given = given_options(ctx)
    if "as_recorded" in given:
        ignored = [flag for name, flag in given.items() if name not in AS_RECORDED_OPTIONS]
        if ignored:
            raise click.UsageError(
                f"--as-recorded runs the trace at its engine's own settings: leave out {', '.join(ignored)}"
            )
    if workers == 1:
        fleet = [given[name] for name in FLEET_OPTIONS if name in given]
        if fleet:
            raise click.UsageError(
                f"{', '.join(fleet)} routes requests among workers: give --workers N (2 or more)"
            )
    if "as_json" in given and "ui" in given:
        raise click.UsageError("--json prints the report, --ui shows it in the terminal: choose one")


def _as_recorded(path: str, as_json: bool, trace_out: str | None = None) -> None:
    from kvtui.whatif.as_recorded import compare

    try:
        result = compare(path, trace_out)
    except (ValueError, KeyError) as exc:
        raise click.ClickException(f"--as-recorded: {exc}") from None
    if as_json:
        differ = [{"request_id": r, "engine": a, "replay": b} for r, a, b in result.differ]
        click.echo(
            json.dumps(
                {"lookups": result.lookups, "again": result.again, "equal": result.equal, "differ": differ}
            )
        )
    else:
        click.echo(
            f"{path}: {result.equal} of {result.lookups} prefix lookups got exactly the engine's hit tokens "
            f"({result.lookups - result.again} at admission, {result.again} again after a preemption or an edit; "
            "the engine core at the trace's settings, arrivals, edits, forks and aborts by step)"
        )
        for rid, engine_hits, replay_hits in result.differ:
            click.echo(f"  {rid}: engine {engine_hits} tokens, replay {replay_hits}")
        if trace_out:
            click.echo(f"wrote {trace_out}: the re-run; kvtui replay {trace_out}")
    if result.differ:
        raise SystemExit(1)


def _export(loaded, path: str, key: str | None, block_sizes: str | None, trace_block_size: int) -> None:
    """--export-anonymized: the workload as keyed hash ids at one block size."""
    from kvtui.whatif.anonymize import export

    if not key:
        raise click.ClickException(
            "--export-anonymized needs a secret key: --anonymize-key KEY or KVTUI_ANONYMIZE_KEY (without it, "
            "anyone could hash a guessed prompt and look for it in the file)"
        )
    sizes = (
        _ints(block_sizes, "--block-size") if block_sizes else [trace_block_size if loaded.hash_ids else 16]
    )
    if len(sizes) != 1:
        raise click.BadParameter("one block size for an export", param_hint="--block-size")
    done = export(loaded, path, sizes[0], key.encode())
    click.echo(
        f"wrote {done['path']}: {done['requests']:,} requests, {done['blocks']:,} distinct blocks of "
        f"{done['block_size']} tokens as keyed hash ids (every shared prefix kept, no token ids); read it with "
        f"kvtui whatif {done['path']} --trace-block-size {done['block_size']}"
    )


def kv_capacities(kv_config, kv_dtypes, capacities: str, sizes: list[int], quiet: bool, host_capacities=None):
    """--capacity per block size, in tokens; byte capacities at each --kv-dtype's bytes per token (every
    precision's capacities in one run): precisions.py's CapacityPlan. A note on stderr for each capacity
    rounded down to whole blocks."""
    from kvtui.whatif.capacity import CapacityError, capacities_of
    from kvtui.whatif.precisions import Precision, capacity_plan, rounded_entries

    precisions: list[Precision] = []
    if kv_config:
        from engine.models.kv_budget import ConfigError, bytes_per_token_at, load_config, shape_from_config

        try:
            config, _ = load_config(kv_config)
            shape = shape_from_config(config)
            wanted = [d.strip() for d in (kv_dtypes or "").split(",") if d.strip()] or [None]
            precisions = [
                Precision(d or shape.dtype or "the config's dtype", bytes_per_token_at(shape, d))
                for d in dict.fromkeys(wanted)
            ]
        except ConfigError as exc:
            raise click.ClickException(str(exc)) from None
    elif kv_dtypes:
        raise click.BadParameter("converts byte capacities: give --kv-config too", param_hint="--kv-dtype")
    if len(precisions) > 1 and host_capacities:
        raise click.BadParameter(
            "the tiers' loads are priced at one K/V precision: give one --kv-dtype with --host-capacity",
            param_hint="--kv-dtype",
        )
    try:
        plan = capacity_plan(capacities, sizes, precisions)
    except CapacityError as exc:
        raise click.ClickException(str(exc)) from None
    if not quiet:
        if kv_dtypes:
            for p in precisions:
                tokens = ", ".join(
                    f"{c.tokens:,}" for c in capacities_of(capacities, sizes[0], p.bytes_per_token)
                )
                click.echo(
                    f"K/V at {p.kv_dtype}: {p.bytes_per_token:,} B per token; --capacity {capacities} = "
                    f"{tokens} tokens",
                    err=True,
                )
        note_rounded(rounded_entries(plan))
    return plan


def note_rounded(entries: list[dict]) -> None:
    """A line on stderr for each capacity rounded down to whole blocks: what it became."""
    from kvtui.whatif.precisions import rounded_line

    for entry in entries:
        click.echo(f"capacity {rounded_line(entry)}: rounded down to whole blocks", err=True)
