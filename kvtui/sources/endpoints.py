"""What `kvtui attach SOURCE...` was told: endpoints with their options, expanded over data-parallel ranks.

A SOURCE is `tcp://HOST:PORT`, optionally followed by comma-separated options:

    tcp://10.0.0.5:5557,replay=tcp://10.0.0.5:5558,name=gpu-a,metrics=http://10.0.0.5:8000/metrics,blocks=4096

`--dp-size N` expands each source to ports PORT..PORT+N-1 (and its replay port likewise), as vLLM and SGLang
offset data-parallel rank r's endpoints by r. With `--bind`, each SOURCE is an address to listen on
(`tcp://127.0.0.1:5557`, or `tcp://*:5557` for every interface): servers given that address connect their PUB
sockets to it, so one kvtui receives from many servers.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, replace

OPTIONS = ("replay", "name", "metrics", "topic", "blocks")
_TCP = re.compile(r"^tcp://(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.*-]+):(\d{1,5})$")


class SourceError(ValueError):
    """A SOURCE argument that cannot be used; the text says which and why."""


@dataclass(frozen=True)
class Source:
    # as given (after --dp-size expansion): the worker's `source` in stats and traces
    endpoint: str
    name: str
    replay: str | None = None
    metrics: str | None = None
    topic: str = ""
    # GPU blocks of each worker, when /metrics cannot tell
    blocks: int | None = None
    bind: bool = False
    # set by --dp-size expansion
    dp_rank: int | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def check_tcp(endpoint: str, what: str = "endpoint") -> tuple[str, int]:
    match = _TCP.match(endpoint)
    if match is None:
        raise SourceError(f"{what} {endpoint!r} is not tcp://HOST:PORT (e.g. tcp://127.0.0.1:5557)")
    port = int(match.group(2))
    if not 0 < port < 65536:
        raise SourceError(f"{what} {endpoint!r}: port {port} is out of range")
    return match.group(1), port


def parse_source(text: str, *, topic: str = "", metrics: str | None = None, bind: bool = False) -> Source:
    """One SOURCE argument; `topic` and `metrics` are the command-wide defaults its options override."""
    parts = [p.strip() for p in text.split(",")]
    endpoint, options = parts[0], {}
    host, port = check_tcp(endpoint, "source")
    if not bind and host in ("*", "0.0.0.0"):
        raise SourceError(
            f"source {endpoint!r}: a wildcard host only makes sense with --bind "
            f"(give the server's address, e.g. tcp://127.0.0.1:{port})"
        )
    for part in parts[1:]:
        key, sep, value = part.partition("=")
        if not sep or key not in OPTIONS or not value:
            raise SourceError(
                f"source {text!r}: option {part!r} is not one of {', '.join(o + '=...' for o in OPTIONS)}"
            )
        options[key] = value
    if "replay" in options:
        check_tcp(options["replay"], "replay endpoint")
        if bind:
            raise SourceError(
                f"source {text!r}: replay= does not work with --bind (kvtui listens and the servers "
                "connect to it, so there is no one server whose replay endpoint to ask): drop replay= and "
                "kvtui sees what is published from now on, or attach without --bind to the server's "
                "endpoint and replay endpoint"
            )
    if "metrics" in options and not options["metrics"].startswith(("http://", "https://")):
        raise SourceError(f"source {text!r}: metrics= must be an http(s):// URL of a /metrics page")
    blocks = None
    if "blocks" in options:
        if not options["blocks"].isdigit() or int(options["blocks"]) <= 0:
            raise SourceError(f"source {text!r}: blocks= must be a positive integer")
        blocks = int(options["blocks"])
    return Source(
        endpoint=endpoint,
        name=options.get("name") or f"{host}:{port}",
        replay=options.get("replay"),
        metrics=options.get("metrics", metrics),
        topic=options.get("topic", topic),
        blocks=blocks,
        bind=bind,
    )


def offset_port(endpoint: str, rank: int) -> str:
    """Rank r's endpoint: the port plus r (what vLLM and SGLang do for data-parallel ranks)."""
    host, port = check_tcp(endpoint)
    return f"tcp://{host}:{port + rank}"


def expand(sources: list[Source], dp_size: int) -> list[Source]:
    if dp_size < 1:
        raise SourceError(f"--dp-size must be at least 1 (got {dp_size})")
    if dp_size == 1:
        return list(sources)
    out = []
    for source in sources:
        for rank in range(dp_size):
            out.append(
                replace(
                    source,
                    endpoint=offset_port(source.endpoint, rank),
                    replay=source.replay and offset_port(source.replay, rank),
                    name=f"{source.name}/dp{rank}",
                    dp_rank=rank,
                )
            )
    return out


def parse_sources(
    texts: list[str], *, topic: str = "", metrics: str | None = None, bind: bool = False, dp_size: int = 1
) -> list[Source]:
    sources = expand([parse_source(t, topic=topic, metrics=metrics, bind=bind) for t in texts], dp_size)
    seen = set()
    for source in sources:
        if source.endpoint in seen:
            raise SourceError(f"source {source.endpoint} is given twice")
        seen.add(source.endpoint)
    return sources
