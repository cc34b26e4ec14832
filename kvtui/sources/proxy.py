"""`kvtui proxy`: an OpenAI-compatible pass-through in front of a vLLM server that records every request.

Clients talk to the proxy as to the server (`/v1/completions`, `/v1/chat/completions`, streamed or not, and
anything else, which passes untouched). Every byte goes through unchanged, both ways: the request is read whole
(its head and body as they came) and written upstream as is, the answer is streamed back as it arrives, and the
proxy reads a copy of it on the side. For each completion request it records one JSON line:

    arrival            wall-clock seconds when the request's head arrived
    forwarded          wall-clock seconds when the proxy had written it whole to the server: the order the
                       server got requests in (request ids follow it; kvtui whatif replays the log in it)
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
    server             the server's cache settings from its /metrics (block_size, num_gpu_blocks,
                       enable_prefix_caching), read once: kvtui whatif replays the log at them
    predicted_cached   with --attach: the tokens kvtui's view of the cache predicted as cached (vLLM never serves
                       the prompt's last token from its cache: the match is cut there), explained at the
                       arrival (`explain`, the best worker's message, `explain_reason` its reason word), and
                       `agrees` (prediction == cached_tokens); the view's published blocks, or the blocks of
                       prompts forwarded and not yet answered when they serve more (in_flight.py:
                       `in_flight_tokens`), since vLLM caches a block before it publishes it; requests are
                       explained in the order they were forwarded (a late /tokenize holds back the later ones)
    admitted, predicted_at_admission, agrees_at_admission
                       with --attach: the engine's time of the step that admitted it, what its cache held for it
                       then, and whether that is vLLM's cached_tokens (kvtui/sources/proxy_admission.py)

The log is the proxy-log format of kvtui/whatif/loaders.py: "what if this vLLM had twice the blocks".
Side requests (/tokenize) never delay the answer: they run beside it.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections import deque
from dataclasses import dataclass, field

from kvtui.sources.in_flight import InFlight
from kvtui.sources.proxy_http import (
    Answer,
    Head,
    HttpError,
    _dechunk,
    _read_raw_body,
    _Tee,
    parse_head,
    read_body,
)
from kvtui.sources.proxy_side import cache_settings, post_json, tokenize_ask

COMPLETION_PATHS = ("/v1/completions", "/v1/chat/completions")
# the largest request head
MAX_HEAD = 1 << 20


class _NoAnswer(Exception):
    """The upstream ended the connection before the head of its answer."""


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
        self.up_host, sep, up_port = hostport.rpartition(":")
        if not sep:
            self.up_host, up_port = hostport, "80"
        if not self.up_host or not up_port.isdigit() or not 0 < int(up_port) < 65536:
            raise ValueError(
                f"--upstream {upstream!r}: give the server's http://HOST:PORT (a port of 1-65535)"
            )
        self.up_port = int(up_port)
        self.upstream = f"http://{self.up_host}:{self.up_port}"
        self.host, self.port = host, port
        # a file object (one JSON line per request) or None
        self.log = log
        # token ids -> list of explanations (kvtui/state/fleet_explain.py), or None without attach
        self.explain = explain
        # settings the server does not publish, written beside its own (`kv_groups`: --kv-config's groups)
        self.server_extra: dict = {}
        self.stats = ProxyStats()
        self.on_record = []
        # called with one line when a client got a 502 (the upstream could not be reached or said nothing)
        self.on_problem = []
        self._server: asyncio.base_events.Server | None = None
        self._next_id = 0
        self.loop: asyncio.AbstractEventLoop | None = None
        # records being finished: the loop keeps only weak references to tasks, so one nobody holds can be
        # collected half done and its record lost
        self._finishing: set[asyncio.Task] = set()
        # the server's cache settings (kvtui/sources/server_cache.py), asked once it has answered a request
        self.server_cache: dict | None = None
        self._asked_cache = False
        # prompts forwarded and not yet answered (kvtui/sources/in_flight.py)
        self.in_flight = InFlight()
        # with attach: when vLLM admits each request, and its prediction then (kvtui/sources/proxy_admission.py)
        self.admission = None
        # (record, its prompt ids' task) not explained yet, in the order they were forwarded
        self._to_explain: deque[tuple] = deque()

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._server = await asyncio.start_server(self._client, self.host, self.port, limit=MAX_HEAD)
        self.port = self._server.sockets[0].getsockname()[1]
        # the server's block size before any event says it (predictions from requests in flight)
        task = asyncio.ensure_future(self.server_settings())
        self._finishing.add(task)
        task.add_done_callback(self._settled)

    def _settled(self, task) -> None:
        self._finishing.discard(task)
        if not task.cancelled() and task.exception() is None and task.result() is not None:
            self.server_cache = task.result()

    async def serve_forever(self) -> None:
        if self._server is None:
            await self.start()
        async with self._server:
            await self._server.serve_forever()

    def close(self) -> None:
        if self._server is not None:
            self._server.close()

    # -------------------------------------------------------------------- one client connection
    async def _client(self, reader, writer) -> None:
        up_reader = up_writer = None
        # a record started and not yet handed to its finishing task
        record = None
        try:
            while True:
                try:
                    raw = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                arrival, t_in = time.time(), time.perf_counter()
                head = parse_head(raw)
                # a connection the upstream closed while idle (its keep-alive ran out) is opened again
                if up_writer is None or up_writer.is_closing() or up_reader.at_eof():
                    try:
                        up_reader, up_writer = await asyncio.open_connection(
                            self.up_host, self.up_port, limit=MAX_HEAD
                        )
                    except OSError as exc:
                        why = f"cannot reach the upstream {self.upstream} ({os.strerror(exc.errno) if exc.errno else exc}): is vLLM running?"
                        return await self._bad_gateway(reader, writer, head, why)
                method, _, rest = head.first.partition(" ")
                path = rest.split(" ", 1)[0].split("?", 1)[0]
                recorded = method == "POST" and path in COMPLETION_PATHS
                if "100-continue" in head.get("expect").lower():
                    # the client (curl, for a body over 1 KiB) waits for the server's go-ahead: relay it
                    up_writer.write(raw)
                    await up_writer.drain()
                    go = await up_reader.readuntil(b"\r\n\r\n")
                    writer.write(go)
                    await writer.drain()
                    if b" 100 " not in go.split(b"\r\n", 1)[0] + b" ":
                        # refused: what it said is the answer; the connection ends with it
                        return
                    body = await _read_raw_body(reader, head)
                    # started as the last bytes go (no await between): records follow the order vLLM got them
                    record = self._start_record(path, head, body, arrival) if recorded else None
                    up_writer.write(body)
                else:
                    body = await _read_raw_body(reader, head)
                    record = self._start_record(path, head, body, arrival) if recorded else None
                    up_writer.write(raw + body)
                await up_writer.drain()
                t_out = time.perf_counter()
                self.stats.requests += 1
                self.stats.forward.append(t_out - t_in)
                try:
                    keep = await self._answer(up_reader, writer, record, t_out, method)
                except _NoAnswer:
                    why = f"the upstream {self.upstream} closed the connection without answering"
                    return await self._bad_gateway(None, writer, head, why)
                record = None
                if not keep or "close" in head.get("connection").lower():
                    return
        except (ConnectionError, asyncio.IncompleteReadError, HttpError, ValueError):
            return
        finally:
            if record is not None:
                # never answered: not in flight any more, and never explained late
                record.setdefault("status", "unanswered")
                self.in_flight.remove(record["request_id"])
            writer.close()
            if up_writer is not None:
                up_writer.close()

    async def _bad_gateway(self, reader, writer, head: Head, why: str) -> None:
        """Answer 502 with the reason (as an OpenAI error object) and tell on_problem; the connection ends."""
        if reader is not None and "100-continue" not in head.get("expect").lower():
            # read what the client sends, so that closing does not reset the connection under the answer
            await _read_raw_body(reader, head)
        body = json.dumps({"error": {"message": why, "type": "bad_gateway", "code": 502}}).encode()
        writer.write(
            b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        await writer.drain()
        for callback in self.on_problem:
            callback(f"502 for {head.first.rsplit(' ', 1)[0]}: {why}")

    async def _answer(self, up_reader, writer, record, t_out: float, method: str) -> bool:
        try:
            raw = await up_reader.readuntil(b"\r\n\r\n")
        # nothing of an answer came: the client can still be told why
        except (asyncio.IncompleteReadError, ConnectionError):
            raise _NoAnswer from None
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
            task = asyncio.ensure_future(self._finish_record(record, answer, status, sse, t_out))
            self._finishing.add(task)
            task.add_done_callback(self._finishing.discard)
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
            "forwarded": round(time.time(), 6),
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
            self._to_explain.append((record, task))
            task.add_done_callback(lambda _: self._explain_in_order())
        return record

    def _explain_in_order(self) -> None:
        """Explain the records whose ids are known, in the order they were forwarded: a prompt's /tokenize may
        come back after a later one's, and the later one's prediction counts the earlier one in flight."""
        while self._to_explain and self._to_explain[0][1].done():
            self._explain_at_arrival(*self._to_explain.popleft())

    def _explain_at_arrival(self, record: dict, task) -> None:
        ids = task.result() if not task.cancelled() and task.exception() is None else None
        # no ids, or answered already (explained too late to predict anything)
        if not ids or "status" in record:
            return
        options = {"salt": record["cache_salt"]} if record["cache_salt"] is not None else {}
        results = self.explain(ids, options)
        if results:
            from kvtui.state.fleet_explain import vllm_hit_tokens

            best = max(results, key=lambda r: r["matched_tokens"])
            # what vLLM can serve of the match (never the prompt's last token)
            record["predicted_cached"] = vllm_hit_tokens(best)
            record["explain"] = best["message"]
            record["explain_reason"] = best["reason"]
            if best.get("caveat"):
                record["caveat"] = best["caveat"]
            size = best.get("block_size") or (self.server_cache or {}).get("block_size") or 0
            # the hybrid rule (hybrid_rule.py) counts the requests in flight itself, group by group
            ahead = (
                0 if best.get("counts_in_flight") else self.in_flight.served(ids, record["cache_salt"], size)
            )
            if best.get("in_flight_tokens"):
                record["in_flight_tokens"] = best["in_flight_tokens"]
            if ahead > record["predicted_cached"]:
                record["predicted_cached"] = record["in_flight_tokens"] = ahead
                record["explain"] += f"; {ahead} tokens from requests in flight (cached, not yet published)"
        self.in_flight.add(record["request_id"], ids, record["cache_salt"])
        size = (self.server_cache or {}).get("block_size")
        if self.admission is not None and size:
            self.admission.forwarded(record["request_id"], ids, record["cache_salt"], size)

    async def _prompt_ids(self, path: str, request: dict) -> list | None:
        ids, ask = tokenize_ask(path, request)
        if ask is None:
            return ids
        reply = await self.side_request("/tokenize", ask)
        tokens = (reply or {}).get("tokens")
        return tokens if isinstance(tokens, list) else None

    async def side_request(self, path: str, body: dict) -> dict | None:
        """A small JSON POST of our own to the server (never on a client's connection)."""
        return await post_json(self.up_host, self.up_port, path, body)

    async def _settings_once(self) -> None:
        """Ask the server's cache settings once (at the start, again at the first record if it had none)."""
        if self.server_cache is None and not self._asked_cache:
            self._asked_cache = True
            self.server_cache = await self.server_settings()

    async def server_settings(self) -> dict | None:
        """The server's cache settings from its /metrics, or None (no such gauge, or no answer)."""
        return await cache_settings(self.up_host, self.up_port)

    async def _finish_record(
        self, record: dict, answer: Answer, status: str, sse: bool, t_out: float
    ) -> None:
        ids = await record.pop("_ids")
        # its ids' callback may not have run yet: explained now, before it counts as answered
        self._explain_in_order()
        # answered: its blocks are published by now
        self.in_flight.remove(record["request_id"])
        if answer.prompt_token_ids:
            # the answer carried them (return_token_ids): vLLM's own
            ids = answer.prompt_token_ids
        record["status"] = int(status) if status.isdigit() else status
        record["model"] = answer.model or record["model"]
        record["prompt_token_ids"] = ids
        usage = answer.usage or {}
        details = usage.get("prompt_tokens_details") or {}
        record["prompt_tokens"] = usage.get("prompt_tokens")
        record["completion_tokens"] = usage.get("completion_tokens")
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
        if self.admission is not None:
            record.update(self.admission.settle(record["request_id"], record["cached_tokens"]))
        if "predicted_cached" in record and record["cached_tokens"] is not None:
            record["agrees"] = record["predicted_cached"] == record["cached_tokens"]
            if record["agrees"]:
                self.stats.agree += 1
            else:
                self.stats.disagree += 1
        await self._settings_once()
        if self.server_cache is not None:
            record["server"] = {**self.server_cache, **self.server_extra}
        self.stats.recorded += 1
        if self.log is not None:
            self.log.write(json.dumps(record) + "\n")
            self.log.flush()
        for callback in self.on_record:
            callback(record)
