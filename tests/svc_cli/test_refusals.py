"""Refusals: the service's (exit 1: its code and message on stderr, stdout empty) and bad usage
(exit 2: refused locally, naming the flag, with nothing sent)."""

from __future__ import annotations

import asyncio
import json

import pytest

from svc_gateway.sandbox import SandboxServer

from .conftest import Run, Svc, Tripwire, write_profile

ADDRESS = "0x" + "ab" * 20
CREDITS = json.dumps(
    {
        "isRedemptionAmountFixed": True,
        "redemptionType": 4,
        "durationSecs": "0",
        "amount": "10",
        "minAmount": "1",
        "maxAmount": "1",
    }
)
FREE = json.dumps({"isCrypto": True, "amounts": [], "receivers": []})
META = '{"name": "P"}'
REGISTER = ("plans", "register-credits-plan", "--plan-metadata", META, "--price-config", FREE)


def refused(run: Run, code: str) -> None:
    assert run.code == 1, str(run)
    assert run.out == "", str(run)
    assert f"Error: {code}" in run.err, str(run)


async def test_service_refusals_exit_1_with_the_code_on_stderr_and_nothing_on_stdout(
    profiles: Svc, sandbox: SandboxServer, builder: dict[str, str]
) -> None:
    svc = profiles
    plan = await svc.json("--profile", "builder", *REGISTER, "--credits-config", CREDITS)
    plan_id = plan["planId"]
    not_owner, unknown, version, bad_token = await asyncio.gather(
        svc(
            "--profile", "subscriber", "plans", "mint-plan-credits", plan_id,
            "--credits-amount", "5", "--credits-receiver", ADDRESS, "--format", "json",
        ),
        svc("plans", "get-plan", "no-such-plan", "--format", "json"),
        svc("--profile", "builder", "--api-version", "9.9", "plans", "get-plans"),
        svc(
            "--profile", "builder", "facilitator", "verify-permissions", "--format", "json",
            "--params", json.dumps({
                "paymentRequired": {
                    "x402Version": 2,
                    "accepts": [{"scheme": "svc:erc4337", "network": "eip155:84532",
                                 "planId": plan_id}],
                },
                "x402AccessToken": "not-a-token",
            }),
        ),
    )  # fmt: skip
    refused(not_owner, "BCK.PROTOCOL.0003 (HTTP 403)")
    assert "owner" in not_owner.err
    refused(unknown, "BCK.PROTOCOL.0001 (HTTP 404)")
    refused(version, "BCK.VERSION.0001 (HTTP 400)")
    assert "9.9" in version.err
    assert bad_token.code == 1 and bad_token.out == "", str(bad_token)
    balance = await svc.json(
        "plans", "get-plan-balance", plan_id, "--account-address", builder["address"]
    )
    assert balance["balance"] == "0"  # the refused mint granted nothing


async def test_an_unreachable_service_exits_1(svc: Svc, builder: dict[str, str]) -> None:
    write_profile(svc, "gone", builder["apiKey"], "http://127.0.0.1:9/api/v1")
    run, login = await asyncio.gather(
        svc("--profile", "gone", "plans", "get-plans"),
        svc("--profile", "gone", "login", "-", stdin=builder["apiKey"] + "\n"),
    )
    assert login.code == 0 and "Logged in" not in login.out, str(login)
    assert "http://127.0.0.1:9/api/v1 could not be reached (connection refused" in login.out
    refused(run, "network_error")
    # issue 44, item 7: it names the URL it could not reach, and the fix in svc's own words
    assert "Could not reach the service at http://127.0.0.1:9 (connection refused" in run.err
    assert "'svc --profile gone config set base-url <URL>'" in run.err, run.err
    assert "SVC_LOCAL_BASE_URL" in run.err and "'svc config init --from-sandbox" in run.err
    assert "baseUrl" not in run.err and "Traceback" not in run.err  # the chat config's word


BAD_USAGE: list[tuple[tuple[str, ...], str]] = [
    (("plans", "mint-plan-credits", "p", "--credits-amount", "many",
      "--credits-receiver", ADDRESS), "'--credits-amount'"),
    (("plans", "mint-plan-credits", "p", "--credits-amount", "5",
      "--credits-receiver", "0x1234"), "'--credits-receiver'"),
    (("plans", "mint-plan-credits", "p", "--credits-amount", "5"), "'--credits-receiver'"),
    ((*REGISTER, "--credits-config", "missing.json"), "'--credits-config': no such file"),
    ((*REGISTER, "--credits-config", "{not json"), "'--credits-config'"),
    ((*REGISTER, "--credits-config", '{"amount": "10", "minAmunt": "1"}'), "minAmunt"),
    ((*REGISTER, "--credits-config", CREDITS.replace('"0"', '"60"')), "'--credits-config'"),
    (("plans", "register-credits-plan", "--plan-metadata", META, "--credits-config", CREDITS,
      "--price-config", '{"isCrypto": true, "amounts": ["1"], "receivers": ["nobody"]}'),
     "'--price-config'"),
    (("plans", "get-agents-associated-to-a-plan", "p", "--pagination", '{"page": 0}'),
     "'--pagination'"),
    (("agents", "register-agent", "--agent-metadata", META, "--payment-plans", "p",
      "--agent-api", '{"endpoints": [{"verb": "POST", "url": "https://a/ask"}]}'),
     "'--agent-api'"),
    (("x402token", "get-x402-access-token", "p", "--expiration", "tomorrow"), "'--expiration'"),
    (("x402token", "get-x402-access-token", "p", "--delegation-id", "d", "--order-limit", "5"),
     "--order-limit"),
    (("facilitator", "settle-permissions", "--params", '{"x402AccessToken": "t"}'),
     "'--params'"),
    (("facilitator", "verify-permissions", "--token", "t"), "--plan"),
    (("facilitator", "verify-permissions", "--token", "t", "--plan", "p"), "'--token'"),
    (("facilitator", "settle-permissions", "--params", "{}", "--token", "t"), "leave out --token"),
    (("pay", "http://agent.example/ask", "--yes"), "plain HTTP would expose it"),
    (("config", "init", "--from-sandbox", "http://127.0.0.1:9", "--environment", "local"),
     "leave out --environment"),
    (("pay", "https://agent.example/ask", "--max-price", "lots"), "'--max-price'"),
    (("pay", "https://agent.example/ask", "--idempotency-key", " "), "--idempotency-key"),
    (("plans", "get-fiat-price-config", "--amount", "$0.50", "--receiver", ADDRESS),
     "'--amount'"),
    (("--api-version", "latest", "plans", "get-plans"), "'--api-version'"),
    (("plans", "get-plans", "--format", "yaml"), "'--format'"),
]  # fmt: skip


@pytest.mark.parametrize("chunk", range(2))
async def test_bad_usage_exits_2_naming_the_flag_and_sends_nothing(
    svc: Svc, tripwire: Tripwire, builder: dict[str, str], chunk: int
) -> None:
    write_profile(svc, "builder", builder["apiKey"], tripwire.base_url)
    cases = BAD_USAGE[chunk::2]
    runs = await asyncio.gather(*(svc("--profile", "builder", *args) for args, _ in cases))
    for run, (_, named) in zip(runs, cases, strict=True):
        assert run.code == 2, str(run)
        assert run.out == "", str(run)
        assert named in run.err, str(run)
    assert tripwire.requests == []


async def test_a_key_is_never_sent_to_another_environments_url(
    svc: Svc, tripwire: Tripwire, builder: dict[str, str]
) -> None:
    write_profile(svc, "builder", builder["apiKey"], tripwire.base_url)  # a local key
    elsewhere = {"SVC_SANDBOX_BASE_URL": tripwire.base_url}
    other_env, no_key, foreign_key = await asyncio.gather(
        # the profile's local key under SVC_ENVIRONMENT=sandbox: not loaded, not sent
        svc("--profile", "builder", "plans", "get-plans", SVC_ENVIRONMENT="sandbox", **elsewhere),
        svc("plans", "get-plans", **elsewhere, SVC_PROFILE="nobody"),
        svc(
            "--profile",
            "builder",
            "plans",
            "get-plans",
            SVC_API_KEY="live:" + builder["apiKey"].split(":", 1)[1],
        ),
    )
    assert other_env.code == 2 and "No API key" in other_env.err, str(other_env)
    assert no_key.code == 2 and "No API key" in no_key.err, str(no_key)
    assert not (
        svc.home / ".config" / "svc" / "profiles" / "nobody"
    ).exists()  # reads create nothing
    assert foreign_key.code == 2 and "live environment" in foreign_key.err, str(foreign_key)
    assert tripwire.requests == []
