"""`kvtui proxy`: an OpenAI-compatible pass-through in front of a vLLM server that records every request.

Clients talk to the proxy as to the server (`/v1/completions`, `/v1/chat/completions`, streamed or not, and
anything else, which passes untouched). Every byte goes through unchanged, both ways: the request is read whole
(its head and body as they came) and written upstream as is, the answer is streamed back as it arrives, and the
proxy reads a copy of it on the side. For each completion request it records one JSON line:

    arrival            wall-clock seconds when the request arrived (kvtui whatif reads this log as a workload)
    request_id, endpoint, stream, status, model
    prompt_token_ids   as vLLM saw them: asked of vLLM's own /tokenize with the same prompt or messages (the
                       same chat template, the same add_special_tokens), never our own tokenizer; a prompt of
                       token ids is taken as sent
    cache_salt         the request's cache_salt
    cached_tokens      usage.prompt_tokens_details.cached_tokens (vLLM with --enable-prompt-tokens-details;
                       a stream reports usage only with stream_options.include_usage), else null
    ttft, tpot         seconds: to the first chunk that carries output, and per output token after it
                       (from the stream; a non-streamed answer has ttft = the whole answer, tpot null)
    output_token_ids   the answer's ids: exact when the answer carries them (return_token_ids), else vLLM's
                       /tokenize of the answer text (`output_ids_from`: "answer" or "tokenize")
    predicted_cached   with --attach: the tokens kvtui's view of the cache predicted as cached (vLLM never serves
                       the prompt's last token from its cache: the match is cut there), explained at the
                       arrival (`explain`, the best worker's message), and `agrees` (prediction == cached_tokens)

The log is the proxy-log format of kvtui/whatif/loaders.py: "what if this vLLM had twice the blocks".
Side requests (/tokenize) never delay the answer: they run beside it.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass, field

COMPLETION_PATHS = ("/v1/completions", "/v1/chat/completions")
# bytes read per upstream read while streaming an answer back
READ_CHUNK = 64 << 10
# the largest request head
MAX_HEAD = 1 << 20


class HttpError(ValueError):
    pass


@dataclass
class Head:
    raw: bytes
    first: str
    headers: dict

    def get(self, name: str, default: str = "") -> str:
        return self.headers.get(name.lower(), default)


def parse_head(raw: bytes) -> Head:
    lines = raw.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            key, _, value = line.partition(":")
            headers[key.strip().lower()] = value.strip()
    return Head(raw, lines[0], headers)


async def read_body(reader: asyncio.StreamReader, head: Head, out=None) -> bytes:
    """The body as it came (chunked framing kept); with `out`, each piece is also written there at once (an
    answer streamed back while it arrives). Returns the de-chunked content (for the side copy)."""
    content = bytearray()
    if "chunked" in head.get("transfer-encoding").lower():
        while True:
            size_line = await reader.readuntil(b"\r\n")
            size = int(size_line.split(b";")[0].strip() or b"0", 16)
            data = await reader.readexactly(size + 2)
            if out is not None:
                out.write(size_line + data)
                await out.drain()
            content += data[:-2]
            if size == 0:
                # trailers end with an empty line; data[:-2] already took the CRLF of a trailer-less end
                break
        return bytes(content)
    length = head.get("content-length")
    if length:
        left = int(length)
        while left:
            data = await reader.read(min(left, READ_CHUNK))
            if not data:
                raise HttpError("connection closed inside a body")
            left -= len(data)
            content += data
            if out is not None:
                out.write(data)
                await out.drain()
        return bytes(content)
    if head.first.startswith("HTTP/") and head.get("connection").lower() == "close":
        while data := await reader.read(READ_CHUNK):
            content += data
            if out is not None:
                out.write(data)
                await out.drain()
    return bytes(content)


# ------------------------------------------------------------------------------------------------ the side copy
@dataclass
class Answer:
    """What the side copy of an answer says."""

    first_output_at: float | None = None
    last_output_at: float | None = None
    chunks_with_output: int = 0
    text: str = ""
    token_ids: list | None = None
    prompt_token_ids: list | None = None
    usage: dict | None = None
    model: str | None = None
    buffer: bytes = b""

    def feed_json(self, obj: dict, now: float) -> None:
        if not isinstance(obj, dict):
            return
        self.model = obj.get("model", self.model)
        if obj.get("usage"):
            self.usage = obj["usage"]
        if obj.get("prompt_token_ids"):
            self.prompt_token_ids = obj["prompt_token_ids"]
        for choice in obj.get("choices") or []:
            piece = choice.get("text")
            if piece is None:
                message = choice.get("delta") or choice.get("message") or {}
                piece = message.get("content") or ""
            ids = choice.get("token_ids")
            if ids:
                self.token_ids = (self.token_ids or []) + list(ids)
            if choice.get("prompt_token_ids") and not self.prompt_token_ids:
                self.prompt_token_ids = choice["prompt_token_ids"]
            if piece or ids:
                self.text += piece or ""
                self.chunks_with_output += 1
                if self.first_output_at is None:
                    self.first_output_at = now
                self.last_output_at = now

    def feed_sse(self, data: bytes, now: float) -> None:
        self.buffer += data
        while b"\n\n" in self.buffer:
            event, _, self.buffer = self.buffer.partition(b"\n\n")
            for line in event.split(b"\n"):
                if line.startswith(b"data:"):
                    payload = line[5:].strip()
                    if payload and payload != b"[DONE]":
                        try:
                            self.feed_json(json.loads(payload), now)
                        except ValueError:
                            pass


class _Tee:
    """A writer that also hands each piece of a streamed answer to the side copy."""

    def __init__(self, writer, answer: Answer, sse: bool):
        self.writer, self.answer, self.sse = writer, answer, sse

    def write(self, data: bytes) -> None:
        self.writer.write(data)
        if self.sse:
            self.answer.feed_sse(_dechunk_piece(data), time.perf_counter())

    async def drain(self) -> None:
        await self.writer.drain()


def _dechunk_piece(data: bytes) -> bytes:
    """A chunk as read_body forwards it (`size\\r\\n` + data + `\\r\\n`), or plain content."""
    head, sep, rest = data.partition(b"\r\n")
    if sep and head and all(c in b"0123456789abcdefABCDEF" for c in head.split(b";")[0].strip()):
        return rest[:-2]
    return data


# ------------------------------------------------------------------------------------------------ the proxy
@dataclass
class ProxyStats:
    requests: int = 0
    recorded: int = 0
    agree: int = 0
    disagree: int = 0
    # seconds the proxy spent between a request's last byte in and its first byte out upstream
    forward: list = field(default_factory=list)


class Proxy:
    """Listens on `host:port`, forwards to `upstream` (http://HOST:PORT), records completions to `log`."""

    def __init__(self, upstream: str, host: str = "127.0.0.1", port: int = 0, log=None, explain=None):
        if not upstream.startswith("http://"):
            raise ValueError(f"--upstream {upstream!r}: give the server's http://HOST:PORT")
        hostport = upstream[len("http://") :].split("/", 1)[0]
        self.up_host, _, up_port = hostport.rpartition(":")
        self.up_port = int(up_port or 80)
        self.host, self.port = host, port
        # a file object (one JSON line per request) or None
        self.log = log
        # token ids -> list of explanations (kvtui/state/fleet_explain.py), or None without attach
        self.explain = explain
        self.stats = ProxyStats()
        self.on_record = []
        self._server: asyncio.base_events.Server | None = None
        self._next_id = 0
        self.loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._server = await asyncio.start_server(self._client, self.host, self.port, limit=MAX_HEAD)
        self.port = self._server.sockets[0].getsockname()[1]

    async def serve_forever(self) -> None:
        await self.start()
        async with self._server:
            await self._server.serve_forever()

    def close(self) -> None:
        if self._server is not None:
            self._server.close()

    # -------------------------------------------------------------------- one client connection
    async def _client(self, reader, writer) -> None:
        up_reader = up_writer = None
        try:
            while True:
                try:
                    raw = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                arrival, t_in = time.time(), time.perf_counter()
                head = parse_head(raw)
                body = await _read_raw_body(reader, head)
                if up_writer is None or up_writer.is_closing():
                    up_reader, up_writer = await asyncio.open_connection(
                        self.up_host, self.up_port, limit=MAX_HEAD
                    )
                up_writer.write(raw + body)
                await up_writer.drain()
                t_out = time.perf_counter()
                self.stats.requests += 1
                self.stats.forward.append(t_out - t_in)
                method, _, rest = head.first.partition(" ")
                path = rest.split(" ", 1)[0].split("?", 1)[0]
                record = None
                if method == "POST" and path in COMPLETION_PATHS:
                    record = self._start_record(path, head, body, arrival)
                keep = await self._answer(up_reader, writer, record, t_out, method)
                if not keep or "close" in head.get("connection").lower():
                    return
        except (ConnectionError, asyncio.IncompleteReadError, HttpError, ValueError):
            return
        finally:
            writer.close()
            if up_writer is not None:
                up_writer.close()

    async def _answer(self, up_reader, writer, record, t_out: float, method: str) -> bool:
        raw = await up_reader.readuntil(b"\r\n\r\n")
        head = parse_head(raw)
        writer.write(raw)
        sse = "text/event-stream" in head.get("content-type")
        answer = Answer() if record is not None else None
        out = _Tee(writer, answer, sse) if answer is not None else writer
        status = head.first.split(" ")[1] if " " in head.first else "?"
        if method == "HEAD" or status in ("204", "304") or status.startswith("1"):
            content = b""
        else:
            content = await read_body(up_reader, head, out)
        await writer.drain()
        if answer is not None:
            if not sse:
                try:
                    answer.feed_json(json.loads(content or b"{}"), time.perf_counter())
                except ValueError:
                    pass
            asyncio.ensure_future(self._finish_record(record, answer, status, sse, t_out))
        return "close" not in head.get("connection").lower()

    # -------------------------------------------------------------------- the record
    def _start_record(self, path: str, head: Head, body: bytes, arrival: float) -> dict | None:
        try:
            if "chunked" in head.get("transfer-encoding").lower():
                body = _dechunk(body)
            request = json.loads(body or b"{}")
        except ValueError:
            return None
        if not isinstance(request, dict):
            return None
        self._next_id += 1
        record = {
            "arrival": round(arrival, 6),
            "request_id": f"proxy-{self._next_id}",
            "endpoint": path,
            "stream": bool(request.get("stream")),
            "model": request.get("model"),
            "cache_salt": request.get("cache_salt"),
        }
        # the prompt ids as vLLM sees them, asked beside the answer; explained the moment they are known
        task = asyncio.ensure_future(self._prompt_ids(path, request))
        record["_ids"] = task
        if self.explain is not None:
            task.add_done_callback(lambda t: self._explain_at_arrival(record, t))
        return record

    def _explain_at_arrival(self, record: dict, task) -> None:
        ids = task.result() if not task.cancelled() and task.exception() is None else None
        if not ids:
            return
        options = {"salt": record["cache_salt"]} if record["cache_salt"] is not None else {}
        results = self.explain(ids, options)
        if results:
            from kvtui.state.fleet_explain import vllm_hit_tokens

            best = max(results, key=lambda r: r["matched_tokens"])
            # what vLLM can serve of the match (never the prompt's last token)
            record["predicted_cached"] = vllm_hit_tokens(best)
            record["explain"] = best["message"]
            if best.get("caveat"):
                record["caveat"] = best["caveat"]

    async def _prompt_ids(self, path: str, request: dict) -> list | None:
        prompt = request.get("prompt")
        if path == "/v1/completions":
            if isinstance(prompt, list) and prompt and isinstance(prompt[0], list):
                prompt = prompt[0]
            if isinstance(prompt, list) and all(type(t) is int for t in prompt):
                return prompt
            if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
                prompt = prompt[0]
            if not isinstance(prompt, str):
                return None
            ask = {"model": request.get("model"), "prompt": prompt}
            if "add_special_tokens" in request:
                ask["add_special_tokens"] = request["add_special_tokens"]
        else:
            ask = {"model": request.get("model"), "messages": request.get("messages")}
            for key in (
                "add_generation_prompt",
                "continue_final_message",
                "chat_template",
                "chat_template_kwargs",
                "tools",
                "add_special_tokens",
            ):
                if key in request:
                    ask[key] = request[key]
        reply = await self.side_request("/tokenize", ask)
        tokens = (reply or {}).get("tokens")
        return tokens if isinstance(tokens, list) else None

    async def side_request(self, path: str, body: dict) -> dict | None:
        """A small JSON POST of our own to the server (never on a client's connection)."""
        try:
            reader, writer = await asyncio.open_connection(self.up_host, self.up_port)
        except OSError:
            return None
        try:
            data = json.dumps(body).encode()
            writer.write(
                f"POST {path} HTTP/1.1\r\nHost: {self.up_host}:{self.up_port}\r\nContent-Type: application/json"
                f"\r\nContent-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode()
                + data
            )
            await writer.drain()
            head = parse_head(await reader.readuntil(b"\r\n\r\n"))
            content = await read_body(reader, head)
            if not head.first.split(" ")[1:2] == ["200"]:
                return None
            return json.loads(content)
        except (OSError, ValueError, asyncio.IncompleteReadError):
            return None
        finally:
            writer.close()

    async def _finish_record(
        self, record: dict, answer: Answer, status: str, sse: bool, t_out: float
    ) -> None:
        ids = await record.pop("_ids")
        if answer.prompt_token_ids:
            # the answer carried them (return_token_ids): vLLM's own
            ids = answer.prompt_token_ids
        record["status"] = int(status) if status.isdigit() else status
        record["model"] = answer.model or record["model"]
        record["prompt_token_ids"] = ids
        usage = answer.usage or {}
        details = usage.get("prompt_tokens_details") or {}
        record["prompt_tokens"] = usage.get("prompt_tokens")
        record["cached_tokens"] = details.get("cached_tokens")
        if answer.token_ids is not None:
            record["output_token_ids"], record["output_ids_from"] = answer.token_ids, "answer"
        elif answer.text:
            reply = await self.side_request(
                "/tokenize", {"model": record["model"], "prompt": answer.text, "add_special_tokens": False}
            )
            record["output_token_ids"] = (reply or {}).get("tokens")
            record["output_ids_from"] = "tokenize"
        else:
            record["output_token_ids"] = []
        n_out = len(record["output_token_ids"] or []) or usage.get("completion_tokens") or 0
        first, last = answer.first_output_at, answer.last_output_at
        record["ttft"] = round(first - t_out, 6) if first is not None else None
        record["tpot"] = (
            round((last - first) / (n_out - 1), 6) if sse and first is not None and n_out > 1 else None
        )
        if "predicted_cached" in record and record["cached_tokens"] is not None:
            record["agrees"] = record["predicted_cached"] == record["cached_tokens"]
            if record["agrees"]:
                self.stats.agree += 1
            else:
                self.stats.disagree += 1
        self.stats.recorded += 1
        if self.log is not None:
            self.log.write(json.dumps(record) + "\n")
            self.log.flush()
        for callback in self.on_record:
            callback(record)


async def _read_raw_body(reader, head: Head) -> bytes:
    """A request body exactly as it came (chunked framing kept)."""
    if "chunked" in head.get("transfer-encoding").lower():
        raw = bytearray()
        while True:
            size_line = await reader.readuntil(b"\r\n")
            size = int(size_line.split(b";")[0].strip() or b"0", 16)
            raw += size_line + await reader.readexactly(size + 2)
            if size == 0:
                return bytes(raw)
    length = int(head.get("content-length") or 0)
    return await reader.readexactly(length) if length else b""


def _dechunk(raw: bytes) -> bytes:
    out, i = bytearray(), 0
    while True:
        j = raw.index(b"\r\n", i)
        size = int(raw[i:j].split(b";")[0] or b"0", 16)
        if size == 0:
            return bytes(out)
        out += raw[j + 2 : j + 2 + size]
        i = j + 2 + size + 2


def summary_line(record: dict) -> str:
    n = len(record.get("prompt_token_ids") or [])
    cached = record.get("cached_tokens")
    line = f"{record['request_id']} {record['endpoint']} {n} prompt tokens, vLLM cached {cached}"
    if "predicted_cached" in record:
        mark = (
            ""
            if record.get("agrees") in (True, None)
            else "  DISAGREES: kvtui's picture is wrong or incomplete"
        )
        line += f", kvtui predicted {record['predicted_cached']}{mark}"
    if record.get("ttft") is not None:
        line += f"; TTFT {record['ttft'] * 1000:.0f} ms"
    if record.get("tpot") is not None:
        line += f", TPOT {record['tpot'] * 1000:.1f} ms"
    return line


class LockedFleet:
    """A FleetState folded by the attach thread and read by the proxy's loop, under one lock."""

    def __init__(self, fleet):
        self.fleet = fleet
        self.lock = threading.Lock()

    def fold(self, events) -> None:
        with self.lock:
            self.fleet.apply_all(events)

    def explain(self, ids, options) -> list[dict]:
        from kvtui.state.fleet_explain import explain_prompt

        with self.lock:
            return explain_prompt(self.fleet, ids, **options)


# ------------------------------------------------------------------------------------------------ reading the log
def read_log(path: str, offset: int = 0) -> tuple[list[dict], int]:
    """Records appended to a proxy log since `offset` (whole lines only), and the offset after them."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return [], offset
    end = data.rfind(b"\n") + 1
    out = []
    for line in data[:end].splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out, offset + end


def request_rows(records: list[dict]) -> list[str]:
    """The attach app's requests tab: one line per request, newest last, with its explanation."""
    if not records:
        return ["no request yet (kvtui proxy --log LOG writes them; attach --requests LOG reads them)"]
    t0 = records[0].get("arrival", 0.0)
    head = f"{'request':<10} {'at s':>7} {'prompt':>6} {'vLLM cached':>11} {'kvtui':>6} {'TTFT ms':>8} {'TPOT ms':>8}  why"
    lines = [head]
    for r in records:
        ttft = "-" if r.get("ttft") is None else f"{r['ttft'] * 1000:.0f}"
        tpot = "-" if r.get("tpot") is None else f"{r['tpot'] * 1000:.1f}"
        predicted = r.get("predicted_cached")
        mark = "" if r.get("agrees") in (True, None) else " DISAGREES"
        lines.append(
            f"{r.get('request_id', '?')[:10]:<10} {r.get('arrival', 0.0) - t0:>7.2f} "
            f"{len(r.get('prompt_token_ids') or []):>6} {r.get('cached_tokens')!s:>11} {predicted!s:>6} "
            f"{ttft:>8} {tpot:>8}  {r.get('explain', '')}{mark}"
        )
    return lines
