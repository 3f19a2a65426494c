"""Issue 14: an environment without a service URL is refused at start, in one line that names
the URL, never as a tool's bad parameters later."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import svc_gateway
from svc_gateway.cli import _chat_config
from svc_gateway.config import ConfigError
from svc_gateway.host import CollectingGateway
from tests.helpers import fake_key

URL_LINE = (
    "No service URL is known for environment 'sandbox': set baseUrl in the plugin config or "
    "SVC_SANDBOX_BASE_URL in the environment"
)


def _gateway(settings: dict[str, object]) -> CollectingGateway:
    return CollectingGateway(settings, logging.getLogger("test"))


def test_register_refuses_a_sandbox_without_a_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SVC_SANDBOX_BASE_URL", raising=False)
    with pytest.raises(ConfigError) as caught:
        svc_gateway.register(_gateway({"environment": "sandbox", "svcApiKey": fake_key("sandbox")}))
    assert str(caught.value) == URL_LINE
    assert "\n" not in str(caught.value)


async def test_degraded_tools_name_the_url_not_their_parameters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SVC_SANDBOX_BASE_URL", raising=False)
    gateway = _gateway({"environment": "sandbox", "svcApiKey": fake_key("sandbox")})
    handle = svc_gateway.register(gateway, on_config_error="degrade")
    assert isinstance(handle, svc_gateway.DegradedPlugin)
    result = await gateway.tools["svc_checkBalance"].handler({"planId": "1"})
    error = result.structuredContent["error"]
    assert error["code"] == "plugin_misconfigured" and URL_LINE in error["message"]


def test_the_variable_supplies_the_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SVC_SANDBOX_BASE_URL", "http://127.0.0.1:9/api/v1")
    handle = svc_gateway.register(_gateway({"environment": "sandbox"}))
    try:
        assert handle.core.base_url == "http://127.0.0.1:9/api/v1"
    finally:
        handle.close()


def test_the_chat_refuses_a_sandbox_key_without_a_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SVC_SANDBOX_BASE_URL", raising=False)
    monkeypatch.delenv("SVC_API_KEY", raising=False)
    with pytest.raises(SystemExit) as caught:
        _chat_config({"environment": "sandbox", "svcApiKey": fake_key("sandbox")})
    assert str(caught.value) == f"svc-gateway: {URL_LINE}"


def test_a_yaml_config_file_is_told_to_be_json(tmp_path: Path) -> None:
    from svc_gateway.cli import _read_config

    path = tmp_path / "config.yaml"
    path.write_text("plugins:\n  entries:\n    svc:\n      settings:\n        environment: local\n")
    with pytest.raises(SystemExit) as caught:
        _read_config(str(path))
    message = str(caught.value)
    assert "is not JSON" in message and "takes a JSON object of the plugin settings" in message
    assert '{"environment": "local", "baseUrl": "http://127.0.0.1:8765/api/v1"}' in message


def test_a_host_entry_point_checks_a_plugin_built_at_start_after_register() -> None:
    """Issue 44, item 7: ``check_at_start`` (Hermes's and AstrBot's entry points) runs the one
    check on the plugin loop; a plain chat config starts (and is told) at its first use, and a
    test's own host (the default) sends nothing at start."""
    key = fake_key("local")
    hosted = {"environment": "local", "baseUrl": "http://127.0.0.1:9/api/v1", "svcApiKey": key}
    hosted["meteredTools"] = {"image_gen": 1}  # type: ignore[assignment]
    handle = svc_gateway.register(_gateway(hosted), check_at_start=True)
    try:
        check = handle.extras["start_check"].result(timeout=10)
        assert not check.ok and "the service at http://127.0.0.1:9 cannot be reached" in check.line
    finally:
        handle.close()
    for settings, options in (
        (hosted, {}),
        ({**hosted, "meteredTools": {}}, {"check_at_start": True}),
    ):
        handle = svc_gateway.register(_gateway(settings), **options)  # type: ignore[arg-type]
        try:
            assert "start_check" not in handle.extras
        finally:
            handle.close()
