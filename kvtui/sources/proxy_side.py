"""The proxy's own requests to the server, beside the clients' (never on a client's connection): vLLM's
/tokenize for a request's prompt ids as the server sees them, and its /metrics for the cache settings."""

from __future__ import annotations

import asyncio
import json

from kvtui.sources.proxy_http import parse_head, read_body


def tokenize_ask(path: str, request: dict) -> tuple[list | None, dict | None]:
    """(prompt ids, None) when the request carries token ids; (None, the /tokenize body that asks the server
    for them: the same prompt or messages, chat template and special tokens); (None, None) when neither."""
    prompt = request.get("prompt")
    if path == "/v1/completions":
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], list):
            prompt = prompt[0]
        if isinstance(prompt, list) and all(type(t) is int for t in prompt):
            return prompt, None
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not isinstance(prompt, str):
            return None, None
        ask = {"model": request.get("model"), "prompt": prompt}
        if "add_special_tokens" in request:
            ask["add_special_tokens"] = request["add_special_tokens"]
        return None, ask
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
    return None, ask


async def post_json(host: str, port: int, path: str, body: dict) -> dict | None:
    """A small JSON POST to the server; its JSON answer, or None (no answer, not 200, not JSON)."""
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except OSError:
        return None
    try:
        data = json.dumps(body).encode()
        writer.write(
            f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json"
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


async def cache_settings(host: str, port: int) -> dict | None:
    """The server's cache settings from its /metrics, or None (no such gauge, or no answer)."""
    from kvtui.sources.server_cache import cache_config

    try:
        reader, writer = await asyncio.open_connection(host, port)
    except OSError:
        return None
    try:
        writer.write(f"GET /metrics HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        head = parse_head(await reader.readuntil(b"\r\n\r\n"))
        content = await read_body(reader, head)
        if head.first.split(" ")[1:2] != ["200"]:
            return None
        return cache_config(content.decode("utf-8", "replace"))
    except (OSError, ValueError, asyncio.IncompleteReadError):
        return None
    finally:
        writer.close()
