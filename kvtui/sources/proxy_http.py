"""HTTP/1.1 as the proxy (kvtui/sources/proxy.py) needs it: a message's head, a body read as it came (chunked
framing kept, each piece forwarded at once), and the side copy of an answer (JSON, or a server-sent event
stream) with the times its output arrived."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass

# bytes read per upstream read while streaming an answer back
READ_CHUNK = 64 << 10


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
