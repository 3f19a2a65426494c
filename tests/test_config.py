"""Config validation, API-key parsing and the manifest's agreement with the code."""

from __future__ import annotations

import json
import time
import tomllib
from pathlib import Path

import pytest

import svc_gateway
from svc_gateway.api_keys import parse_api_key
from svc_gateway.config import ConfigError, load_config
from svc_gateway.manifest import build_manifest
from tests.helpers import fake_key

ROOT = Path(__file__).resolve().parent.parent


def test_defaults_match_the_spec() -> None:
    config = load_config({})
    assert config.environment == "sandbox"
    assert config.credits_per_request == 1
    assert config.enable_paid_endpoint is False
    assert config.agent_endpoint_path == "/svc/agent"
    assert config.paid_endpoint_host == "127.0.0.1"
    assert config.api_version == "1.1"


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"environment": "prod"}, "environment"),
        ({"creditsPerRequest": 0}, "creditsPerRequest"),
        ({"paymentType": "cash"}, "paymentType"),
        ({"baseUrl": "ftp://x"}, "baseUrl"),
        ({"agentEndpointPath": "no-slash"}, "agentEndpointPath"),
        ({"apiVersion": "latest"}, "apiVersion"),
        ({"paidEndpointPort": 70000}, "paidEndpointPort"),
        ({"plans": [{"name": "x"}]}, "plans.0.planId"),
        ({"unknownField": 1}, "unknownField"),
    ],
)
def test_invalid_config_names_the_field(raw: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(raw)
    assert field in str(info.value)


def test_local_environment_needs_base_url() -> None:
    with pytest.raises(ConfigError, match="baseUrl"):
        load_config({"environment": "local"})
    assert load_config(
        {"environment": "local", "baseUrl": "http://127.0.0.1:1/api/v1/"}
    ).base_url == ("http://127.0.0.1:1/api/v1")


def test_api_version_forms_normalise() -> None:
    assert load_config({"apiVersion": "v1.0"}).api_version == "1.0"
    assert load_config({"apiVersion": "1.1.7"}).api_version == "1.1"


def test_key_gives_environment_and_address() -> None:
    address = "0x" + "ab" * 20
    key = parse_api_key(fake_key("live", address))
    assert key.environment == "live"
    assert key.address == address
    assert parse_api_key(fake_key("weird", address)).environment is None


def test_expired_key_is_reported() -> None:
    assert parse_api_key(fake_key(exp=int(time.time()) - 10)).expired
    assert not parse_api_key(fake_key(exp=int(time.time()) + 3600)).expired


@pytest.mark.parametrize(
    "bad",
    [
        "no-colon-here",
        "sandbox:not-a-jwt",
        "sandbox:a.b.c",
        "sandbox:" + "eyJhbGciOiJIUzI1NiJ9.e30.x",
    ],
    ids=["no-prefix", "not-a-jwt", "not-json", "no-sub"],
)
def test_malformed_key_error_never_contains_the_key(bad: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_api_key(bad)
    message = str(info.value)
    assert "Invalid API key" in message
    assert bad.split(":", 1)[-1] not in message


def test_bad_key_in_config_is_named_without_echoing_it() -> None:
    secret = "sandbox:eyJzZWNyZXQiOiJ0b3Atc2VjcmV0In0.eyJub3N1YiI6MX0.sig"
    with pytest.raises(ConfigError) as info:
        load_config({"svcApiKey": secret})
    assert "svcApiKey" in str(info.value)
    assert "eyJ" not in str(info.value)


def test_config_repr_hides_the_key() -> None:
    key = fake_key()
    config = load_config({"svcApiKey": key, "baseUrl": "http://127.0.0.1:1/api/v1"})
    assert key not in repr(config) and key not in str(config)
    assert key.split(":", 1)[1] not in repr(config.api_key)


def test_manifest_config_schema_is_the_config_model() -> None:
    manifest = json.loads((ROOT / "manifest.json").read_text())
    assert manifest == build_manifest(), "run: python -m svc_gateway.manifest"
    aliases = {f.alias or name for name, f in type(load_config({})).model_fields.items()}
    assert set(manifest["configSchema"]["properties"]) == aliases
    assert len(manifest["tools"]) == 9
    assert {c["name"] for c in manifest["commands"]} == {
        "svc_login",
        "svc_logout",
        "svc_spend",
        "svc_earnings",
        "svc_approve",
        "svc_deny",
        "svc_allow",
    }


def test_versions_agree() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    manifest = json.loads((ROOT / "manifest.json").read_text())
    assert pyproject["project"]["version"] == svc_gateway.__version__ == manifest["version"]


def test_key_with_non_finite_expiry_is_a_clear_error() -> None:
    import base64

    payload = base64.urlsafe_b64encode(b'{"sub": "0x' + b"1" * 40 + b'", "exp": Infinity}')
    with pytest.raises(ConfigError, match="expiry"):
        parse_api_key("local:eyJhbGciOiJIUzI1NiJ9." + payload.decode().rstrip("=") + ".sig")


def test_doubled_prefix_is_refused() -> None:
    with pytest.raises(ConfigError, match="more than one environment prefix"):
        parse_api_key("local:" + fake_key())
