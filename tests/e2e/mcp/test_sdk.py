"""The SDK adapter and the registration rules: what needs the mcp extra, which versions are
supported, what a registration refuses, and how handler answers become MCP results."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from typing import Any

import pytest

import svc_gateway
from svc_gateway.config import ConfigError
from svc_gateway.interop import mcp_sdk as sdk
from svc_gateway.selling.ways_in.mcp import Options
from svc_gateway.selling.ways_in.mcp.results import prompt_result, resource_result, tool_result

from .conftest import McpMarket


def test_nothing_imports_mcp_until_it_is_used() -> None:
    root = os.path.dirname(os.path.dirname(svc_gateway.__file__))
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    code = (
        "import sys, svc_gateway, svc_gateway.selling.ways_in.mcp, svc_gateway.tools.query,"
        " svc_gateway.buying.mcp;"
        "print(sorted(m for m in ('mcp', 'uvicorn', 'starlette') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": path},
        check=True,
    )
    assert done.stdout.strip() == "[]"


def test_installed_sdk_is_one_of_the_supported_majors() -> None:
    major, minor = sdk.sdk_version()
    installed = importlib.metadata.version("mcp")
    assert installed.startswith(f"{major}.{minor}")
    assert major == 2 or (major == 1 and minor >= 20)


@pytest.mark.parametrize(
    ("version", "problem"),
    [(None, "pip install"), ("1.19.3", "not supported"), ("3.0.0", "not supported")],
)
def test_a_missing_or_unsupported_sdk_is_a_config_error_saying_what_to_install(
    monkeypatch: pytest.MonkeyPatch, version: str | None, problem: str
) -> None:
    def fake(name: str) -> str:
        if version is None:
            raise importlib.metadata.PackageNotFoundError(name)
        return version

    monkeypatch.setattr(importlib.metadata, "version", fake)
    with pytest.raises(ConfigError, match=problem):
        sdk.sdk_version()


def test_bearer_of_reads_only_a_bearer_token() -> None:
    assert sdk.bearer_of("Bearer abc.def") == "abc.def"
    assert sdk.bearer_of("bearer   xyz ") == "xyz"
    assert sdk.bearer_of("Basic dXNlcg==") is None
    assert sdk.bearer_of("Bearer ") is None
    assert sdk.bearer_of(None) is None


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"credits": -1}, "negative"),
        ({"credits": True}, "int or a function"),
        ({"credits": "5"}, "int or a function"),
        ({"max_amount": 0}, "at least 1"),
        ({"max_amount": 1.5}, "must be an int"),
        ({"on_redeem_error": "explode"}, "ignore"),
    ],
)
def test_handler_options_refuse_what_the_spec_does_not_allow(
    options: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ConfigError, match=problem):
        Options(**options)


def test_fixed_credits_are_verified_up_front_and_a_function_verifies_max_amount() -> None:
    assert Options(credits=4).verify_amount == 4
    assert Options(credits=lambda _c: 9, max_amount=6).verify_amount == 6
    assert Options(credits=0).free and not Options().free


async def test_registration_refuses_duplicates_and_bad_server_names(
    mcp_market: McpMarket,
) -> None:
    server = mcp_market.server
    server.tool("dup", lambda _a: "x")
    with pytest.raises(ConfigError, match="already registered"):
        server.tool("dup", lambda _a: "y")
    with pytest.raises(ConfigError, match="serverName"):
        type(server)(server.core, server.flow, server_name="has space")
    assert server.logical_uris() == ["mcp://weather-srv/tools/dup"]


def test_handler_answers_become_mcp_results() -> None:
    assert tool_result("hi") == {"content": [{"type": "text", "text": "hi"}]}
    assert tool_result({"a": 1})["structuredContent"] == {"a": 1}
    assert tool_result([{"type": "text", "text": "x"}]) == {
        "content": [{"type": "text", "text": "x"}]
    }
    own = {"content": [{"type": "text", "text": "y"}], "_meta": {"forged": True}}
    assert tool_result(own) == {"content": [{"type": "text", "text": "y"}]}  # no forged _meta
    assert tool_result(3)["content"][0]["text"] == "3"
    assert resource_result("u://1", "text/plain", {"k": 1})["contents"][0]["text"] == '{"k": 1}'
    contents = {"contents": [{"uri": "u://2", "text": "t"}]}
    assert resource_result("u://2", "text/plain", contents) == contents
    assert prompt_result("go")["messages"][0]["content"]["text"] == "go"
    listed = [{"role": "user", "content": {"type": "text", "text": "m"}}]
    assert prompt_result(listed) == {"messages": listed}
    assert prompt_result({"messages": listed, "x": 1}) == {"messages": listed}
