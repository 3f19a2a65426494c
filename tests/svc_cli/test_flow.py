"""A builder and a subscriber run the whole paid cycle with ``svc`` against the sandbox:
register a plan from the helpers' JSON and an agent, order, read the balance, get a token,
verify (burns nothing), settle (burns one credit; a replay returns the same transaction),
and mint."""

from __future__ import annotations

import asyncio
import json

from svc_gateway.encoding import decode_access_token
from svc_gateway.sandbox import SandboxServer
from tests.conftest import USDC

from .conftest import Svc


async def balance(svc: Svc, plan_id: str) -> str:
    answer = await svc.json("--profile", "subscriber", "plans", "get-plan-balance", plan_id)
    return str(answer["balance"])


async def register_plan(svc: Svc, owner: str, credits: int = 10) -> str:
    """The helpers' stdout, written to files unedited, registers the plan."""
    credits_run, price_run = await asyncio.gather(
        svc.ok("plans", "get-fixed-credits-config", "--credits-granted", str(credits)),
        svc.ok(
            "plans", "get-erc20-price-config", "--amount", "$1.00", "--receiver", owner,
            "--token-address", USDC,
        ),
    )  # fmt: skip
    assert json.loads(price_run.out)["amounts"] == ["1000000"]
    plan = await svc.json(
        "--profile", "builder", "plans", "register-credits-plan",
        "--plan-metadata", '{"name": "Starter", "description": "ten answers"}',
        "--price-config", svc.write("price.json", price_run.out),
        "--credits-config", svc.write("credits.json", credits_run.out),
    )  # fmt: skip
    return str(plan["planId"])


async def test_the_paid_cycle_from_the_command_line(
    profiles: Svc, sandbox: SandboxServer, builder: dict[str, str], subscriber: dict[str, str]
) -> None:
    svc = profiles
    plan_id = await register_plan(svc, builder["address"])
    registered = await svc.json(
        "--profile", "builder", "agents", "register-agent",
        "--agent-metadata", '{"name": "Echo"}',
        "--agent-api", '{"endpoints": [{"POST": "http://127.0.0.1:9/ask"}]}',
        "--payment-plans", plan_id,
    )  # fmt: skip
    agent_id = registered["data"]["agentId"]
    agents, listed, order = await asyncio.gather(
        svc.json(
            "plans", "get-agents-associated-to-a-plan", plan_id, "--pagination", '{"page": 1}'
        ),
        svc.ok("--profile", "builder", "plans", "get-plans"),
        svc.json("--profile", "subscriber", "plans", "order-plan", plan_id),
    )
    assert [a["id"] for a in agents["agents"]] == [agent_id]
    assert "Starter" in listed.out and plan_id in listed.out and "{" not in listed.out
    assert order["success"] is True

    ordered, token_run, envelope = await asyncio.gather(
        balance(svc, plan_id),
        svc.ok(
            "--profile", "subscriber", "x402token", "get-x402-access-token", plan_id,
            "--agent-id", agent_id, "--redemption-limit", "5", "--format", "json",
        ),
        svc.json(
            "x402token", "build-payment-required", plan_id, "--agent-id", agent_id,
            "--resource-url", "http://127.0.0.1:9/ask",
        ),
    )  # fmt: skip
    assert ordered == "10"
    token = token_run.json()["accessToken"]
    assert "Created delegation" in token_run.err  # notes go to stderr, never stdout
    assert envelope["accepts"][0]["planId"] == plan_id
    params = {"paymentRequired": envelope, "x402AccessToken": token, "maxAmount": "1"}
    params_file = svc.write("params.json", json.dumps(params))

    # the seller's side from the token and the plan alone; --params still works the same
    verify = ("--profile", "builder", "facilitator", "verify-permissions")
    verified, by_params = await asyncio.gather(
        svc.json(*verify, "--token", "-", "--plan", plan_id, "--max-amount", "1", stdin=token),
        svc.json(*verify, "--params", params_file),
    )
    assert verified["isValid"] is True and by_params["isValid"] is True
    assert await balance(svc, plan_id) == "10"  # verify burns nothing

    request_id = verified["agentRequest"]["agentRequestId"]
    settle = (
        "--profile", "builder", "facilitator", "settle-permissions", "--token", token,
        "--plan", plan_id, "--max-amount", "1", "--agent-request-id", request_id,
    )  # fmt: skip
    settled = await svc.json(*settle)
    assert settled["success"] is True and settled["creditsRedeemed"] == "1"
    assert await balance(svc, plan_id) == "9"
    replay = await svc.json(*settle)
    assert replay["transaction"] == settled["transaction"]

    minted, expirable = await asyncio.gather(
        svc.json(
            "--profile", "builder", "plans", "mint-plan-credits", plan_id,
            "--credits-amount", "5", "--credits-receiver", subscriber["address"],
        ),
        svc.json(
            "--profile", "builder", "plans", "mint-plan-expirable", plan_id,
            "--credits-amount", "2", "--credits-receiver", subscriber["address"],
            "--credits-duration", "3600",
        ),
    )  # fmt: skip
    assert minted["success"] is True and expirable["success"] is True
    # 9 after the settle, + 5 + 2 minted; the replay burned nothing more
    assert await balance(svc, plan_id) == "16"


async def test_helpers_chain_into_each_other_and_into_a_time_plan(profiles: Svc) -> None:
    svc = profiles
    base = (await svc.ok("plans", "get-expirable-duration-config", "--duration-of-plan", "60")).out
    mirrored = await svc.ok(
        "plans", "set-onchain-mirror", "--credits-config", "-", "--onchain-mirror", "true",
        stdin=base,
    )  # fmt: skip
    retyped = await svc.ok(
        "plans", "set-redemption-type", "--credits-config", "-", "--redemption-type", "ONLY_OWNER",
        stdin=mirrored.out,
    )  # fmt: skip
    credits = json.loads(retyped.out)
    assert credits["onchainMirror"] is True and credits["redemptionType"] == 1
    assert credits["durationSecs"] == "60"
    free = svc.write("free.json", (await svc.ok("plans", "get-free-price-config")).out)
    plan = await svc.json(
        "--profile", "builder", "plans", "register-time-plan", "--plan-metadata",
        '{"name": "Hour"}', "--price-config", free, "--credits-config", "-", stdin=retyped.out,
    )  # fmt: skip
    shown = await svc.json("plans", "get-plan", plan["planId"])
    assert shown["metadata"]["plan"]["accessLimit"] == "time"
    table = await svc.ok("plans", "get-plan", plan["planId"])
    # nested JSON as an outline: "main" above its fields, never a dotted "metadata.main.name"
    assert "metadata.main.name" not in table.out and "\n  main\n" in table.out
    assert any(line.split() == ["name", "Hour"] for line in table.out.splitlines())


async def test_a_card_plan_sells_by_checkout_url_and_card_token(
    profiles: Svc, builder: dict[str, str]
) -> None:
    svc = profiles
    price_run, credits_run = await asyncio.gather(
        svc.ok("plans", "get-fiat-price-config", "--amount", "$2.00", "--receiver",
               builder["address"]),
        svc.ok("plans", "get-fixed-credits-config", "--credits-granted", "3"),
    )  # fmt: skip
    plan = await svc.json(
        "--profile", "builder", "plans", "register-plan", "--plan-metadata", '{"name": "Card"}',
        "--price-config", svc.write("fiat.json", price_run.out),
        "--credits-config", svc.write("c.json", credits_run.out), "--access-limit", "credits",
    )  # fmt: skip
    plan_id = plan["planId"]
    checkout, token, wrong = await asyncio.gather(
        svc.ok("--profile", "subscriber", "plans", "order-fiat-plan", plan_id),
        # no --payment-type: the plan's scheme decides (a card plan takes a card token)
        svc.json("--profile", "subscriber", "x402token", "get-x402-access-token", plan_id),
        svc("--profile", "subscriber", "x402token", "get-x402-access-token", plan_id,
            "--payment-type", "crypto"),
    )  # fmt: skip
    assert checkout.out.strip().startswith("http") and "\n" not in checkout.out.strip()
    claims = decode_access_token(token["accessToken"])
    assert claims is not None and claims["accepted"]["scheme"] == "svc:card-delegation"
    assert wrong.code == 2 and "--payment-type crypto" in wrong.err and wrong.out == ""
    assert "Created delegation" not in wrong.err  # refused before creating one
