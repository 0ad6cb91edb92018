#!/usr/bin/env python3
"""A fast stand-in for vLLM's HTTP API, to measure the probe's own overhead: fixed answers to
/health, /v1/models and the one-token completions, no inference; prints "ready" once every port
listens. Usage: `python benchmarks/probe/fast_server.py PORT [PORT ...]`.
"""

from __future__ import annotations

import asyncio
import json
import sys

MODEL = "standin"
BODIES = {
    "/health": b"",
    "/v1/models": json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]}).encode(),
    "/v1/completions": json.dumps(
        {"object": "text_completion", "model": MODEL, "choices": [{"index": 0, "text": "!"}]}
    ).encode(),
    "/v1/chat/completions": json.dumps(
        {
            "object": "chat.completion",
            "model": MODEL,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "!"}}],
        }
    ).encode(),
}


def response(status: str, body: bytes) -> bytes:
    head = f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    return head.encode() + body


ANSWERS = {path: response("200 OK", body) for path, body in BODIES.items()}
NOT_FOUND = response("404 Not Found", b'{"error": "not found"}')


async def serve_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            path = lines[0].split(" ")[1]
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            if length:
                await reader.readexactly(length)
            writer.write(ANSWERS.get(path, NOT_FOUND))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def main(ports: list[int]) -> None:
    servers = [await asyncio.start_server(serve_connection, "127.0.0.1", port) for port in ports]
    print("ready", flush=True)
    await asyncio.gather(*(server.serve_forever() for server in servers))


if __name__ == "__main__":
    asyncio.run(main([int(p) for p in sys.argv[1:]]))
