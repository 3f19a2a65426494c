"""Issue 44: start-up checks what the plugin depends on and says so in one line: the service
(an answer to meta/versions) and Redis at stateUrl (PING), each named with what to do when it
cannot be reached; the chat prints the line before its prompt."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from svc_gateway.sandbox import SandboxServer
from svc_gateway.service.checks import start_check
from svc_gateway.service.client import ServiceClient
from tests.chat.test_cli import WAIT_SECS, chat_env
from tests.service.test_unreachable import closed_port


async def test_a_reachable_service_is_one_line_that_says_so(
    sandbox: SandboxServer, subscriber: dict[str, str]
) -> None:
    for key, said in ((subscriber["apiKey"], "answers (API 1."), (None, "answers.")):
        client = ServiceClient(sandbox.base_url, key)  # without a key: its 401 is an answer
        try:
            check = await start_check(client)
        finally:
            await client.aclose()
        assert check.ok and check.line.startswith("Start-up check: the service at http://")
        assert said in check.line and "\n" not in check.line


async def test_an_unreachable_service_and_redis_are_named_with_the_fix() -> None:
    port = closed_port()
    client = ServiceClient(f"http://127.0.0.1:{port}/api/v1", None)
    try:
        check = await start_check(client, f"redis://:secret@127.0.0.1:{port}/2", secs=5)
    finally:
        await client.aclose()
    assert not check.ok and "\n" not in check.line
    assert check.line.startswith("Start-up check failed: the service at http://127.0.0.1:")
    assert "cannot be reached (connection refused" in check.line
    assert "svc-gateway sandbox" in check.line
    assert f"Redis at 127.0.0.1:{port}/2 (stateUrl) cannot be reached" in check.line
    assert "secret" not in check.line


async def test_a_service_that_answers_an_error_is_told_to_check_base_url(
    sandbox: SandboxServer,
) -> None:
    client = ServiceClient(sandbox.base_url.removesuffix("/api/v1"), None)
    try:
        check = await start_check(client)
    finally:
        await client.aclose()
    assert not check.ok and "answered HTTP 404" in check.line and "/api/v1" in check.line


async def test_the_chat_prints_the_check_before_its_prompt(tmp_path: Path) -> None:
    port = closed_port()
    config = {"environment": "local", "baseUrl": f"http://127.0.0.1:{port}/api/v1"}
    (tmp_path / "dead.json").write_text(json.dumps(config))
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "svc_gateway.cli", "chat", "--config", str(tmp_path / "dead.json")),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=chat_env(tmp_path),
    )
    out, err = await asyncio.wait_for(child.communicate(b""), WAIT_SECS)
    assert child.returncode == 0, err.decode()
    (line,) = [x for x in out.decode().splitlines() if x.startswith("Start-up check")]
    assert f"the service at http://127.0.0.1:{port} cannot be reached" in line
    assert "Traceback" not in err.decode()
