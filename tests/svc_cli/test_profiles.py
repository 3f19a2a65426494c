"""Profiles and keys: stored like the plugin's (owner-only file here, no keyring), shown only
masked, overridden by SVC_API_KEY / SVC_ENVIRONMENT, removed by logout."""

from __future__ import annotations

import asyncio
import json
import stat
from pathlib import Path

from svc_gateway.sandbox import SandboxServer

from .conftest import Svc, Tripwire, init_profile, write_profile


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def config_dir(svc: Svc) -> Path:
    return svc.home / ".config" / "svc"


async def test_keys_stay_out_of_the_config_file_and_out_of_every_output(
    svc: Svc, sandbox: SandboxServer, builder: dict[str, str]
) -> None:
    key = builder["apiKey"]
    token = key.split(":", 1)[1]
    await init_profile(svc, "builder", key, sandbox.base_url)
    directory = config_dir(svc)
    settings = directory / "config.json"
    credentials = directory / "profiles" / "builder" / "credentials.json"
    assert token not in settings.read_text()
    assert token in credentials.read_text()  # the file backend: no keyring on this machine
    assert mode(settings) == 0o600 and mode(credentials) == 0o600
    assert mode(credentials.parent) == 0o700 and mode(directory) == 0o700
    table, shown = await asyncio.gather(
        svc.ok("config", "show"), svc.json("--profile", "builder", "config", "show")
    )
    for run_text in (table.out, table.err, json.dumps(shown)):
        assert token not in run_text and token[:40] not in run_text
    assert shown["profile"] == "builder" and shown["environment"] == "local"
    assert shown["account"] == builder["address"] and shown["keyFrom"] == "file"
    assert shown["apiKey"].startswith("local:") and shown["apiKey"].endswith(token[-4:])
    assert "builder" in table.out and "local" in table.out


async def test_login_from_stdin_then_logout_removes_the_key(
    svc: Svc, sandbox: SandboxServer, subscriber: dict[str, str]
) -> None:
    await svc.ok(
        "--profile", "sub", "config", "init", "--environment", "local",
        "--base-url", sandbox.base_url,
    )  # fmt: skip
    login = await svc.ok("--profile", "sub", "login", "-", stdin=subscriber["apiKey"] + "\n")
    assert f"Logged in to local as {subscriber['address']}" in login.out
    assert (await svc.json("--profile", "sub", "plans", "get-plans"))["total"] == 0
    out = await svc.ok("--profile", "sub", "logout")
    assert "Logged out" in out.out
    token = subscriber["apiKey"].split(":", 1)[1]
    stored = config_dir(svc) / "profiles" / "sub" / "credentials.json"
    assert not stored.exists() or token not in stored.read_text()
    after = await svc("--profile", "sub", "plans", "get-plans")
    assert after.code == 2 and "No API key" in after.err and after.out == ""


async def test_environment_variables_override_the_profile(
    svc: Svc, sandbox: SandboxServer, builder: dict[str, str], subscriber: dict[str, str]
) -> None:
    write_profile(svc, "builder", builder["apiKey"], sandbox.base_url)
    as_subscriber, on_sandbox = await asyncio.gather(
        svc.json("--profile", "builder", "config", "show", SVC_API_KEY=subscriber["apiKey"]),
        svc.json("--profile", "builder", "config", "show", SVC_ENVIRONMENT="sandbox"),
    )
    assert as_subscriber["account"] == subscriber["address"]
    assert as_subscriber["keyFrom"] == "SVC_API_KEY"
    # another environment: neither the profile's local key nor its local URL applies
    assert on_sandbox["environment"] == "sandbox" and on_sandbox["environmentFrom"] == (
        "SVC_ENVIRONMENT"
    )
    assert on_sandbox["apiKey"] is None and on_sandbox["baseUrl"] is None


async def test_config_set_edits_the_profile_and_refuses_a_foreign_key(
    svc: Svc, sandbox: SandboxServer, builder: dict[str, str]
) -> None:
    write_profile(svc, "builder", builder["apiKey"], sandbox.base_url)
    version = await svc.json("--profile", "builder", "config", "set", "api-version", "v1.0.3")
    assert version["apiVersion"] == "1.0"
    live_key = "live:" + builder["apiKey"].split(":", 1)[1]
    foreign = await svc("--profile", "builder", "config", "set", "api-key", "-", stdin=live_key)
    assert foreign.code == 2 and "live environment" in foreign.err and foreign.out == ""
    moved = await svc.json("--profile", "builder", "config", "set", "environment", "sandbox")
    assert moved["baseUrl"] is None and moved["apiKey"] is None  # both were local's


async def test_global_options_go_before_or_after_the_command_and_the_last_wins(
    svc: Svc, sandbox: SandboxServer, builder: dict[str, str]
) -> None:
    write_profile(svc, "builder", builder["apiKey"], sandbox.base_url)
    before, after, last = await asyncio.gather(
        svc.ok("--format", "json", "plans", "get-plans"),
        svc.ok("plans", "get-plans", "--format", "json"),
        svc.ok("--format", "json", "plans", "get-plans", "--format", "table"),
    )
    assert before.json() == after.json() == {"total": 0, "page": 1, "offset": 10, "plans": []}
    assert last.out.startswith("(none)") and "{" not in last.out


async def test_login_checks_the_key_and_never_says_logged_in_for_a_refused_one(
    svc: Svc, sandbox: SandboxServer, tripwire: Tripwire, subscriber: dict[str, str]
) -> None:
    key = subscriber["apiKey"]
    signature = key.rsplit(".", 1)[1]
    corrupted = key[: -len(signature)] + ("A" if signature[0] != "A" else "B") + signature[1:]
    write_profile(svc, "down", key, tripwire.base_url)  # a service that cannot say (500)
    await svc.ok("--profile", "good", "config", "init", "--base-url", sandbox.base_url,
                 "--environment", "local")  # fmt: skip
    refused, refused_init, unchecked, no_url = await asyncio.gather(
        svc("--profile", "good", "login", "-", stdin=corrupted + "\n"),
        svc(
            "--profile",
            "bad",
            "config",
            "init",
            "--api-key",
            "-",
            "--base-url",
            sandbox.base_url,
            stdin=corrupted + "\n",
        ),
        svc("--profile", "down", "login", "-", stdin=key + "\n"),
        svc("--profile", "nowhere", "login", "-", stdin=key + "\n"),
    )
    assert refused.code == 1 and "refused this API key" in refused.err, str(refused)
    assert "Logged in" not in refused.out + refused.err and "nothing was stored" in refused.err
    stored = config_dir(svc) / "profiles" / "good" / "credentials.json"
    assert not stored.exists() or corrupted.split(":", 1)[1] not in stored.read_text()
    assert refused_init.code == 1 and "refused this API key" in refused_init.err
    assert "bad" not in (await svc.json("config", "show"))["profiles"]  # init made nothing
    for run in (unchecked, no_url):
        assert run.code == 0 and "Logged in" not in run.out, str(run)
        assert "could NOT check it" in run.out, str(run)
    assert "answered" in unchecked.out and "no service URL" in no_url.out


async def test_config_init_from_sandbox_makes_both_profiles(
    svc: Svc, sandbox: SandboxServer, tripwire: Tripwire
) -> None:
    made, wrong = await asyncio.gather(
        svc.json("config", "init", "--from-sandbox", sandbox.origin),
        svc("config", "init", "--from-sandbox", tripwire.base_url),
    )
    assert [row["profile"] for row in made["profiles"]] == ["builder", "subscriber"]
    assert {row["baseUrl"] for row in made["profiles"]} == {sandbox.base_url}
    builder, subscriber = await asyncio.gather(
        svc.json("--profile", "builder", "config", "show"),
        svc.json("--profile", "subscriber", "plans", "get-plans"),  # the key works
    )
    assert builder["active"] is True and builder["environment"] == "local"
    assert builder["account"] == made["profiles"][0]["account"]
    assert subscriber["total"] == 0
    assert wrong.code == 1 and "Could not create the sandbox's accounts" in wrong.err
