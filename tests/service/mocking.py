"""``aioresponses`` made to work with aiohttp ≥ 3.13 (its 0.7.9 release predates
``ClientResponse(stream_writer=...)``). Import ``aioresponses`` from here in tests."""

from __future__ import annotations

from typing import Any

import aiohttp
from aioresponses import aioresponses as _aioresponses
from yarl import URL

__all__ = ["aioresponses"]


class _NoWriter:
    output_size = 0


class CompatResponse(aiohttp.ClientResponse):
    """A canned response that does not need the ``stream_writer`` newer aiohttp requires."""

    def __init__(self, method: str, url: URL, **kwargs: Any) -> None:
        kwargs.setdefault("stream_writer", _NoWriter())
        super().__init__(method, url, **kwargs)


class aioresponses(_aioresponses):
    def add(self, url: Any, method: str = "GET", **kwargs: Any) -> None:
        kwargs.setdefault("response_class", CompatResponse)
        super().add(url, method, **kwargs)
