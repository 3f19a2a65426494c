"""``svc`` never prints a key a service answer quotes (issue 41 item 10): stdout and stderr,
errors and results, table and ``--format json``, pass the plugin logs' redaction."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from tests.support import serve_app

from .conftest import Svc, write_profile


@pytest.fixture
async def echoing_service() -> AsyncIterator[str]:
    """A service that quotes the caller's ``Authorization`` header back: in a 401's message
    for plans, in a 200's fields for agents."""

    async def refuse(request: web.Request) -> web.Response:
        header = request.headers.get("Authorization", "")
        return web.json_response(
            {"code": "BCK.APIKEY.0004", "message": f"invalid key in '{header}'", "hint": header},
            status=401,
        )

    async def answer(request: web.Request) -> web.Response:
        header = request.headers.get("Authorization", "")
        key = header.removeprefix("Bearer ")
        agents = [{"id": "a-1", "metadata": {"name": header}, "owner": key}]
        return web.json_response(
            {"total": 1, "page": 1, "offset": 10, "agents": agents, "apiKey": key}
        )

    app = web.Application()
    app.router.add_get("/api/v1/protocol/plans", refuse)
    app.router.add_get("/api/v1/protocol/agents", answer)
    async with serve_app(app, access_log=None) as origin:
        yield f"{origin}/api/v1"


async def test_a_key_quoted_by_a_401_or_an_answer_is_never_printed(
    svc: Svc, echoing_service: str, builder: dict[str, str]
) -> None:
    key = builder["apiKey"]
    write_profile(svc, "echo", key, echoing_service)
    runs = await asyncio.gather(
        svc("--profile", "echo", "plans", "get-plans"),
        svc("--profile", "echo", "plans", "get-plans", "--format", "json"),
        svc("--profile", "echo", "agents", "get-agents"),
        svc("--profile", "echo", "agents", "get-agents", "--format", "json"),
    )
    refused_table, refused_json, listed_table, listed_json = runs
    for run in runs:
        assert key not in run.out and key not in run.err, str(run)
        assert key.split(":", 1)[1] not in run.out + run.err, str(run)
    for run in (refused_table, refused_json):
        assert run.code == 1 and run.out == "", str(run)
        assert "Error: BCK.APIKEY.0004 (HTTP 401): invalid key in 'Bearer [REDACTED]'" in run.err
    assert listed_table.code == 0 and "[REDACTED]" in listed_table.out, str(listed_table)
    assert listed_json.code == 0, str(listed_json)
    document = listed_json.json()  # still one JSON document
    assert document["agents"][0]["metadata"]["name"] == "Bearer [REDACTED]"
    assert document["apiKey"] == "[REDACTED]"


async def test_a_key_given_as_a_bad_flag_value_is_not_echoed_in_the_usage_error(
    svc: Svc, builder: dict[str, str]
) -> None:
    key = builder["apiKey"]
    run = await svc("plans", "get-plans", "--format", key)
    assert run.code == 2 and key not in run.err and "--format" in run.err, str(run)
