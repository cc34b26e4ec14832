"""Reading a what-if workload, whatever its format, into `SimRequest`s (requests.py); the format is detected
from the content (`detect_format`), and `--format` overrides it.

    trace      a kvtui trace (header line with "type": "header"): each `request_arrived` with its prompt ids,
               salt and arrival time, and its recorded output (its `token_emitted` events); forks and edits
               are not replayed (noted)
    workload   a workload JSON (fixtures/workloads, engine/workload.py): token-id prompts always work; text
               prompts and chat messages need a tokenizer (`--tokenizer`: smollm2, gemma3, a model directory
               or a tokenizer.json) and are tokenized as `kvtui record` does (engine/models/text.py's
               `prompt_ids`: chat messages through the chat template); arrival_step s becomes s x STEP_SECONDS
    mooncake   Mooncake JSONL: timestamp (ms), input_length, output_length, hash_ids (mooncake.py)
    bailian    Qwen-Bailian JSONL: chat_id, timestamp (s), per-block hash_ids of 16 tokens (bailian.py)
    blocks     kvtui's binary block trace: the same fields in fixed-width columns (block_trace.py)
    proxy-log  the request log of kvtui's OpenAI proxy (kvtui proxy --log), one JSON object per line:
                   {"arrival": 12.5,                      seconds (or "timestamp": ms since the epoch / start)
                    "request_id": "chatcmpl-1",           optional (default: line number)
                    "prompt_token_ids": [1, 2, 3],        what the server tokenized
                    "output_token_ids": [4, 5],           what it generated (or "output_length": N)
                    "cache_salt": null,                   optional (vLLM's cache_salt; a LoRA name may go here)
                    "cached_tokens": 64,                  optional: what the server served from its cache
                    "server": {"block_size": 32, ...},    optional: its cache settings (kvtui proxy records them)
                    "forwarded": 12.51,                   optional: when the server got it (arrival otherwise)
                    "ttft": 0.4, "tpot": 0.05, "stream": true}   optional: when its answer came (timeline.py)
               arrivals are made relative to the first one; with cached_tokens the report checks the twin
               against the server (fidelity.py), and with server it replays at the server's settings

A bad line of a JSONL format is skipped and named (`Workload.problems`: "line 7: ..."); the good lines are kept.
Any of them may be zstd-compressed (known by its first bytes, whatever its name): it is decompressed as it is
read (engine/trace/compressed.py), and the format is detected from what it holds.
"""

from __future__ import annotations

import json
from pathlib import Path

from engine.trace.compressed import CompressedFileError, open_text
from kvtui.whatif.bailian import load_bailian, looks_like_bailian
from kvtui.whatif.mooncake import load_mooncake, looks_like_mooncake
from kvtui.whatif.requests import SimRequest, Workload

FORMATS = ("trace", "workload", "mooncake", "bailian", "blocks", "proxy-log")
# a workload JSON counts arrivals in engine steps: one step is taken to last this long
STEP_SECONDS = 0.02


class WorkloadFormatError(ValueError):
    """The file cannot be read as a workload; the message says where and what to do."""


def detect_format(path: str | Path) -> str:
    """trace, workload, mooncake or proxy-log, from the first non-empty line (or the whole JSON document)."""
    path = Path(path)
    from kvtui.whatif.block_trace import is_block_trace

    try:
        if is_block_trace(path):
            return "blocks"
        with open_text(path, errors="strict") as handle:
            first = next((line for line in handle if line.strip()), "")
    except FileNotFoundError:
        raise WorkloadFormatError(f"no such workload file: {path}") from None
    except CompressedFileError as exc:
        raise WorkloadFormatError(str(exc)) from None
    except UnicodeDecodeError:
        raise WorkloadFormatError(_not_text(path)) from None
    if not first:
        from engine.trace.opening import EMPTY_FILE

        raise WorkloadFormatError(f"{path}: {EMPTY_FILE}")
    try:
        obj = json.loads(first)
    except json.JSONDecodeError:
        obj = None
    if isinstance(obj, dict):
        if obj.get("type") == "header":
            return "trace"
        if looks_like_bailian(obj):
            return "bailian"
        if looks_like_mooncake(obj):
            return "mooncake"
        if "prompt_token_ids" in obj and "requests" not in obj:
            return "proxy-log"
        if "requests" in obj:
            return "workload"
    if first.lstrip().startswith("{"):
        # a multi-line JSON document: a workload JSON
        return "workload"
    raise WorkloadFormatError(
        f"{path}: cannot tell the format from line 1 (expected a kvtui trace header, a "
        "Mooncake or Qwen-Bailian line with hash_ids, a proxy-log line with prompt_token_ids, or a "
        "workload JSON); pass --format " + "|".join(FORMATS)
    )


def _not_text(path: Path) -> str:
    """Bytes that are not UTF-8: said as every trace reader says it when line 1 holds them."""
    from engine.trace.opening import problem_line
    from engine.trace.reader import read_header

    _, error = read_header(path)
    if error is not None and "UTF-8" in error.message:
        return problem_line(path, error)
    return f"{path}: not UTF-8 text (a workload is JSON or JSON Lines)"


def load(
    path: str | Path, fmt: str | None = None, trace_block_size: int = 512, tokenizer: str | None = None
) -> Workload:
    path = Path(path)
    fmt = fmt or detect_format(path)
    if fmt == "trace":
        return load_trace(path)
    if fmt == "workload":
        return load_workload_json(path, tokenizer)
    if fmt == "mooncake":
        return load_mooncake(path, trace_block_size)
    if fmt == "bailian":
        return load_bailian(path)
    if fmt == "blocks":
        from kvtui.whatif.block_trace import load_blocks

        return load_blocks(path)
    if fmt == "proxy-log":
        return load_proxy_log(path)
    raise WorkloadFormatError(f"unknown format {fmt!r}: choose one of {', '.join(FORMATS)}")


# --- kvtui traces -----------------------------------------------------------------------------------------
def load_trace(path: Path) -> Workload:
    from engine.trace.opening import open_trace, skipped_warnings

    # a bad line: TraceUnusable, in the wording every trace reader uses
    trace = open_trace(path)
    problems: list[str] = []
    requests: dict[str, SimRequest] = {}
    outputs: dict[str, list[int]] = {}
    notes, forks, edits = [], 0, 0
    for event in trace.events:
        kind = event["type"]
        if kind == "request_arrived":
            if event.get("parent_id"):
                forks += 1
                continue
            rid = event["request_id"]
            requests[rid] = SimRequest(
                rid,
                float(event["t"]),
                list(event["prompt_token_ids"]),
                None,
                int(event["max_tokens"]),
                event.get("cache_salt"),
                phase=event.get("phase"),
            )
            outputs[rid] = []
        elif kind == "token_emitted" and event["request_id"] in outputs:
            outputs[event["request_id"]].append(int(event["token_id"]))
        elif kind == "edit":
            edits += 1
    for rid, req in requests.items():
        if outputs[rid]:
            req.output_token_ids = outputs[rid]
    if forks:
        notes.append(f"{forks} forked requests are not replayed (their parents are)")
    if edits:
        notes.append(f"{edits} edits are not replayed: each request runs its recorded prompt and output")
    t0 = min((r.arrival for r in requests.values()), default=0.0)
    ordered = sorted(requests.values(), key=lambda r: r.arrival)
    for r in ordered:
        r.arrival -= t0
    return Workload(path.name, "trace", ordered, problems, notes, warnings=skipped_warnings(trace, str(path)))


# --- workload JSON ----------------------------------------------------------------------------------------
def load_workload_json(path: Path, tokenizer: str | None = None) -> Workload:
    from engine.workload import WorkloadError, load_workload

    try:
        workload = load_workload(path)
    except WorkloadError as exc:
        raise WorkloadFormatError(str(exc)) from None
    texts = [r.request_id for r in workload.requests if not _token_ids(r.prompt)]
    encode = _encoder(tokenizer, path, texts) if texts else None
    requests, notes = [], []
    for r in workload.requests:
        prompt = list(r.prompt) if _token_ids(r.prompt) else encode(r.prompt)
        requests.append(
            SimRequest(
                r.request_id,
                r.arrival_step * STEP_SECONDS,
                prompt,
                None,
                r.sampling.max_tokens,
                r.cache_salt,
                phase=r.phase,
            )
        )
    notes.append(
        f"arrival_step s arrives at s x {STEP_SECONDS * 1000:g} ms; outputs are max_tokens fresh tokens"
    )
    if workload.edits:
        notes.append(f"{len(workload.edits)} edits are not replayed")
    return Workload(workload.name, "workload", requests, [], notes)


def _token_ids(prompt) -> bool:
    return isinstance(prompt, list) and all(type(t) is int for t in prompt)


def _encoder(tokenizer: str | None, path: Path, texts: list[str]):
    which = ", ".join(texts[:5]) + (" ..." if len(texts) > 5 else "")
    if tokenizer is None:
        raise WorkloadFormatError(
            f"{path}: requests {which} have text prompts, and token ids are needed: pass --tokenizer "
            "(smollm2, gemma3, a model directory or a tokenizer.json), or give the recorded trace of this "
            "workload instead (fixtures/traces/, `kvtui record`), which carries token ids"
        )
    from engine.models.text import prompt_ids

    tok = load_tokenizer(tokenizer)

    def encode(prompt) -> list[int]:
        try:
            # text, or chat messages through the chat template: as `kvtui record` renders them
            return prompt_ids(tok, prompt)
        except ValueError as exc:
            raise WorkloadFormatError(f"{path}: --tokenizer {tokenizer}: {exc}") from None

    return encode


def load_tokenizer(spec: str):
    """A transformers tokenizer from what --model takes: a packaged model's name (smollm2, gemma3: its prepared
    copy, made on first use as --model makes it), a model directory, or a tokenizer.json file."""
    try:
        from transformers import AutoTokenizer, PreTrainedTokenizerFast
    except ImportError:
        raise WorkloadFormatError(
            "--tokenizer needs transformers, the tokenizer `kvtui record` uses (pip install 'kvtui[engine]')"
        ) from None
    from engine.models.packaged import PACKAGED, prepared_dir
    from engine.models.shape import ModelLoadError

    try:
        source = prepared_dir(spec) if spec in PACKAGED else Path(spec)
    except ModelLoadError as exc:
        raise WorkloadFormatError(f"--tokenizer {spec}: {exc}") from None
    try:
        if source.is_file():
            return PreTrainedTokenizerFast(tokenizer_file=str(source))
        return AutoTokenizer.from_pretrained(str(source))
    except (OSError, ValueError) as exc:
        # transformers' reasons can run over several lines: one line on the command line
        reason = " ".join(str(exc).split()) or type(exc).__name__
        if source.is_dir() and not (source / "tokenizer.json").exists():
            reason = "a directory without tokenizer.json: give a model directory, smollm2 or gemma3"
        raise WorkloadFormatError(
            f"--tokenizer {spec}: cannot read a tokenizer from {source} ({reason})"
        ) from None


# --- proxy request log ------------------------------------------------------------------------------------
def load_proxy_log(path: Path) -> Workload:
    requests, problems = [], []
    server = None
    with open_text(path) as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                requests.append(_proxy_request(obj, number))
            except (json.JSONDecodeError, ValueError, TypeError, KeyError) as exc:
                problems.append(f"line {number}: {_why(exc)}")
                continue
            if server is None and isinstance(obj.get("server"), dict):
                server = obj["server"]
    if not requests:
        raise WorkloadFormatError(
            f"{path}: no usable proxy-log line" + (f" ({problems[0]})" if problems else "")
        )
    requests.sort(key=lambda r: r.arrival)
    t0 = requests[0].arrival
    for r in requests:
        r.arrival -= t0
    from kvtui.sources.proxy_events import events_beside

    events = events_beside(path, t0)
    return Workload(path.name, "proxy-log", requests, problems, [], server, server_events=events)


def _proxy_request(obj, number: int) -> SimRequest:
    if not isinstance(obj, dict):
        raise ValueError("a line is one JSON object")
    prompt = obj["prompt_token_ids"]
    if not isinstance(prompt, list) or not prompt or not all(type(t) is int and t >= 0 for t in prompt):
        raise ValueError("prompt_token_ids must be a non-empty list of token ids")
    output = obj.get("output_token_ids")
    if output is not None and not (isinstance(output, list) and all(type(t) is int for t in output)):
        raise ValueError("output_token_ids must be a list of token ids")
    if type(obj.get("forwarded")) in (int, float):
        # when the server got it (kvtui proxy): the order it admitted requests in
        arrival = float(obj["forwarded"])
    elif "arrival" in obj:
        arrival = float(obj["arrival"])
    elif "timestamp" in obj:
        arrival = float(obj["timestamp"]) / 1000
    else:
        raise ValueError("needs arrival (seconds) or timestamp (ms)")
    length = len(output) if output else int(obj.get("output_length", 1))
    salt = obj.get("cache_salt")
    cached = obj.get("cached_tokens")
    return SimRequest(
        str(obj.get("request_id", f"line{number}")),
        arrival,
        prompt,
        output or None,
        max(length, 1),
        None if salt is None else str(salt),
        server_cached=cached if type(cached) is int else None,
        timeline=_answer_times(obj, len(output or ())),
    )


def _answer_times(obj: dict, n: int) -> tuple[float | None, float] | None:
    """(first output token or None, last) in seconds after arrival, from the proxy's ttft and tpot: a stream
    has both, an answer read whole only its end (its ttft); None when the record cannot say."""
    ttft, tpot, stream = obj.get("ttft"), obj.get("tpot"), obj.get("stream")
    if not n or type(ttft) not in (int, float) or ttft < 0:
        return None
    if not stream:
        return (None, float(ttft))
    if n == 1:
        return (float(ttft), float(ttft))
    if type(tpot) not in (int, float) or tpot < 0:
        return None
    return (float(ttft), float(ttft) + tpot * (n - 1))


def _why(exc: Exception) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"not JSON ({exc.msg} at column {exc.colno})"
    if isinstance(exc, KeyError):
        return f"missing field {exc.args[0]!r}"
    return str(exc)
