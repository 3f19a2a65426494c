"""Issue 44: settings that cannot work are refused at start with the fix (a baseUrl without
/api/v1, in the chat's config or SVC_<ENV>_BASE_URL); a typo gets the nearest name (config
keys, chat commands, tools); ``svc-gateway`` alone prints what there is to do. Each run as a
newcomer types it: the console script, a JSON config, a line in the chat."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from svc_gateway.config import ConfigError, check_base_url, load_config
from svc_gateway.hosts.reference import ReferenceGateway
from tests.chat.test_cli import WAIT_SECS, chat_env
from tests.helpers import fake_key


def svc_gateway(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "svc_gateway.cli", *args],
        input="",
        capture_output=True,
        text=True,
        timeout=WAIT_SECS,
        env={**chat_env(tmp_path), **env},
        check=False,
    )


def test_a_chat_config_whose_base_url_lacks_api_v1_is_refused_with_the_fix(
    tmp_path: Path,
) -> None:
    config = tmp_path / "chat.json"
    config.write_text(json.dumps({"environment": "local", "baseUrl": "http://127.0.0.1:8765/"}))
    done = svc_gateway(tmp_path, "chat", "--config", str(config))
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "http://127.0.0.1:8765 does not end in /api/v1" in done.stderr
    assert "set it to http://127.0.0.1:8765/api/v1" in done.stderr
    assert "svc-gateway 0.1.0 reference chat" not in done.stdout  # refused before it starts


def test_an_environment_variable_without_api_v1_is_named(tmp_path: Path) -> None:
    done = svc_gateway(
        tmp_path,
        "chat",
        SVC_API_KEY=fake_key("sandbox"),
        SVC_SANDBOX_BASE_URL="https://api.example.test",
    )
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "SVC_SANDBOX_BASE_URL https://api.example.test does not end in /api/v1" in (done.stderr)


def test_the_shared_validator_keeps_a_good_root_and_hides_a_password() -> None:
    assert check_base_url(" http://127.0.0.1:8765/api/v1/ ") == "http://127.0.0.1:8765/api/v1"
    with pytest.raises(ConfigError) as caught:
        check_base_url("https://user:hunter2@svc.example/v1", "base-url")
    assert str(caught.value).startswith("base-url https://svc.example/v1 does not end in")
    assert "hunter2" not in str(caught.value)
    with pytest.raises(ConfigError, match="must be an http"):
        check_base_url("127.0.0.1:8765/api/v1")


def test_a_config_typo_gets_the_nearest_setting() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config({"environment": "live", "planid": "1", "stateurl": "redis://x"})
    text = str(caught.value)
    assert "planid: not a setting of the svc plugin. Did you mean planId?" in text
    assert "stateurl: not a setting of the svc plugin. Did you mean stateUrl?" in text
    assert "Extra inputs are not permitted" not in text


async def test_a_typed_command_or_tool_gets_the_nearest_name() -> None:
    import svc_gateway

    gateway = ReferenceGateway({"environment": "local", "baseUrl": "http://127.0.0.1:9/api/v1"})
    handle = svc_gateway.register(gateway)
    try:
        command = await gateway.handle_line("/svc_alow 2 USD per day")
        assert command == "Unknown command /svc_alow. Did you mean /svc_allow? Type /help."
        tool = await gateway.handle_line('svc_chekBalance {"planId": "1"}')
        assert tool is not None and "Did you mean svc_checkBalance?" in tool
        missing = await gateway.call_tool("svc_listplans", {})
        assert "Did you mean svc_listPlans?" in missing.text
    finally:
        handle.close()


def test_svc_gateway_alone_prints_what_there_is_to_do(tmp_path: Path) -> None:
    done = svc_gateway(tmp_path)
    assert done.returncode == 0 and done.stderr == ""
    for line in ("usage: svc-gateway", "Start here:", "svc-gateway demo", "svc-gateway chat"):
        assert line in done.stdout
