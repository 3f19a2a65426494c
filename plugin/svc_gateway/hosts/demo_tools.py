"""Demo host tools for trying a hosted gateway without code: ``image_gen`` and ``web_search``.

``svc-gateway chat --demo-tools`` adds them to the reference gateway, so ``meteredTools`` has
something to meter: ``image_gen`` returns a small PNG (a data URL, a square of the colour the
prompt hashes to), ``web_search`` returns canned results. Neither calls anything outside.
"""

from __future__ import annotations

import base64
import hashlib
import struct
import zlib
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

SIDE = 16  # pixels of the demo picture


class HostWithTools(Protocol):
    def add_host_tool(self, name: str, run: Callable[[dict[str, Any]], Awaitable[Any]]) -> None:
        """Add one of the host's own tools."""


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def small_png(seed: str, side: int = SIDE) -> bytes:
    """A ``side``×``side`` RGB PNG of one colour derived from ``seed``."""
    red, green, blue = hashlib.sha256(seed.encode()).digest()[:3]
    row = b"\x00" + bytes((red, green, blue)) * side
    header = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)
    return b"".join(
        (
            b"\x89PNG\r\n\x1a\n",
            _chunk(b"IHDR", header),
            _chunk(b"IDAT", zlib.compress(row * side)),
            _chunk(b"IEND", b""),
        )
    )


async def image_gen(arguments: dict[str, Any]) -> dict[str, Any]:
    """A demo picture for ``prompt``."""
    prompt = str(arguments.get("prompt") or "")
    data = base64.b64encode(small_png(prompt)).decode()
    return {
        "tool": "image_gen",
        "prompt": prompt[:200],
        "image": f"data:image/png;base64,{data}",
        "note": f"a {SIDE}x{SIDE} demo picture (no model was called)",
    }


async def web_search(arguments: dict[str, Any]) -> dict[str, Any]:
    """Canned results for ``query``."""
    query = str(arguments.get("query") or arguments.get("q") or "")[:200]
    return {
        "tool": "web_search",
        "query": query,
        "results": [
            {"title": f"Demo result 1 for {query!r}", "url": "https://example.com/1"},
            {"title": f"Demo result 2 for {query!r}", "url": "https://example.com/2"},
        ],
        "note": "canned demo results (no search engine was called)",
    }


DEMO_TOOLS: dict[str, Callable[[dict[str, Any]], Awaitable[Any]]] = {
    "image_gen": image_gen,
    "web_search": web_search,
}


def add_demo_tools(host: HostWithTools) -> list[str]:
    """Add the demo tools to ``host``; returns their names."""
    for name, run in DEMO_TOOLS.items():
        host.add_host_tool(name, run)
    return list(DEMO_TOOLS)
