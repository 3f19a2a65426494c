"""What svc_queryAgent tells a chat user when it refuses, word for word (the hint is the next
step), and the small parsing rules behind its checks: URL canonical form, resolver port, answer
decoding, the request it sends and the token it asks for (issue 11, mutation run of tools)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import httpx
import pytest

from svc_gateway.account.core import PluginCore
from svc_gateway.approvals.gate import model_ticket
from svc_gateway.buying import addresses as qd
from svc_gateway.buying import answers as qa
from svc_gateway.buying import charges as qo
from svc_gateway.buying import http as qh
from svc_gateway.buying import purchase as qp
from svc_gateway.buying import tokens as qt
from svc_gateway.chat.failure import ToolFailure
from svc_gateway.config import PluginConfig
from svc_gateway.interop.agent_card import FoundCard
from svc_gateway.service.errors import ServiceError
from svc_gateway.tools import query as q
from tests.buying.test_query_parts import PAYER, b64, core_with, purchase, reply


def refusal(call: Any, *args: Any) -> ToolFailure:
    with pytest.raises(ToolFailure) as refused:
        call(*args)
    return refused.value


async def async_refusal(call: Any, *args: Any) -> ToolFailure:
    with pytest.raises(ToolFailure) as refused:
        await call(*args)
    return refused.value


def test_bad_agent_urls_say_what_to_pass_instead() -> None:
    bad_port = refusal(qd.check_agent_url, "https://a.example:99999/x")
    assert (bad_port.message, bad_port.hint) == (
        "agentUrl is not a valid URL",
        "Pass the agent's full https:// URL.",
    )
    secret = refusal(qd.check_agent_url, "https://u:pw@a.example/x")
    assert (secret.message, secret.hint) == (
        "agentUrl carries a user name or password",
        "Pass the agent's URL without credentials in it.",
    )
    plain = refusal(qd.check_agent_url, "http://a.example/x")
    assert plain.message == (
        "Refusing to send a payment token to http://a.example: plain HTTP would expose it "
        "(a bearer credential) to anyone on the network"
    )
    assert plain.hint == (
        "Use the agent's https:// URL (plain http is allowed only for 127.0.0.1/localhost)."
    )
    nameless = refusal(qd.check_agent_url, "https:///x")
    assert nameless.message.startswith("Refusing to send a payment token to https://?: plain")


async def test_the_resolver_is_asked_for_the_port_the_url_connects_to(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[tuple[str, int]] = []

    async def record(host: str, port: int) -> list[str]:
        asked.append((host, port))
        return ["127.0.0.1"]

    monkeypatch.setattr(qd, "resolver", record)
    for url in ("https://a.example/x", "http://localhost/x", "https://a.example:8443/x"):
        await qd.check_agent_address(core_with(), url)
    await qd.check_agent_address(core_with(), "https:///x")
    assert asked == [("a.example", 443), ("localhost", 80), ("a.example", 8443), ("", 443)]


async def test_unresolvable_and_private_hosts_say_what_to_do(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def fail(host: str, port: int) -> list[str]:
        raise OSError("no such host")

    monkeypatch.setattr(qd, "resolver", fail)
    lost = await async_refusal(qd.check_agent_address, core_with(), "https://nowhere.example/x")
    assert (lost.code, lost.message, lost.hint) == (
        "agent_unreachable",
        "Could not resolve the agent's host nowhere.example; nothing was paid",
        "Check the host name in agentUrl.",
    )

    async def private(host: str, port: int) -> list[str]:
        return ["10.0.0.7"]

    monkeypatch.setattr(qd, "resolver", private)
    inside = await async_refusal(qd.check_agent_address, core_with(), "https://in.example/x")
    assert inside.message == (
        "Refusing to pay an agent at in.example: it resolves to 10.0.0.7, a private, "
        "link-local or unspecified address; nothing was paid"
    )
    assert inside.hint == (
        "Agents on this machine (127.0.0.1) and on the public internet are allowed; to pay one "
        "on a private network, the operator adds its host or range to allowedAgentHosts in the "
        "plugin config."
    )


def test_the_canonical_form_of_an_endpoint_url() -> None:
    assert qp._normalise("HTTPS://A.Example:443/x/") == "https://a.example/x"
    assert qp._normalise("https://a.example") == "https://a.example/"
    assert qp._normalise("https://a.example/x?") == "https://a.example/x"
    assert qp._normalise("http://[::1]:80/x") == "http://[::1]/x"
    assert qp._normalise("http://[::1]:81/x") == "http://[::1]:81/x"
    assert qp._normalise("https://a.example:8443/x") == "https://a.example:8443/x"
    assert qp._normalise("https:///x") == "https:///x"


@pytest.mark.parametrize(
    ("url", "registered"),
    [
        ("https://evil.example/x", "https://a.example/x"),  # another host
        ("https://a.example/xX", "https://a.example/x"),  # another path
        ("http://[::1]:81/x", "http://[::1]/x"),  # another port
        ("https://a.example/x", "https://a.example/x?v=1"),  # the query counts
    ],
)
def test_an_endpoint_that_differs_anywhere_is_not_the_registered_one(
    url: str, registered: str
) -> None:
    assert not qp.is_registered(url, [("POST", registered)], "7")


def test_endpoints_under_api_and_registry_are_read() -> None:
    document = {
        "api": {"endpoints": [{"POST": "https://a.example/api"}]},
        "registry": {"endpoints": [{"POST": "https://a.example/reg"}]},
    }
    assert qp.registered_endpoints(document) == [
        ("POST", "https://a.example/api"),
        ("POST", "https://a.example/reg"),
    ]


def test_choosing_a_plan_says_which_to_pass() -> None:
    core = cast(PluginCore, SimpleNamespace(plan_id=None))
    none = refusal(qp._choose_plan, core, None, None, [], "a7")
    assert (none.code, none.message, none.hint) == (
        "missing_plan_id",
        "Agent a7 sells no plan, so there is nothing to pay it with",
        "Ask the agent's owner which plan to buy, then pass planId.",
    )
    sold = [str(n) for n in range(1, 12)]
    many = refusal(qp._choose_plan, core, None, None, sold, "a7")
    assert many.code == "missing_plan_id"
    assert many.message == (
        "Agent a7 sells 11 plans; say which one to pay with: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10"
    )
    assert many.hint == (
        "Pass planId with one of these plans (svc_orderPlan buys one if you have none)."
    )


def test_agent_errors_word_for_word() -> None:
    def failure(status: int, body: bytes = b"") -> ToolFailure:
        return refusal(qa.interpret, reply(status, body), purchase(), PAYER, "https://a/x")

    for status in (300, 399):
        assert failure(status).hint == (
            "The agent sent the request elsewhere; svc_queryAgent does not follow redirects "
            "with a payment token. Use the agent's registered URL directly."
        )
    for status in (400, 401, 499):
        assert failure(status).hint == ("The agent refused this request. Check the prompt.")
    assert failure(404).hint == (
        "There is no paid endpoint at https://a/x (wrong path or method): check agentUrl; "
        "retrying the same URL will not help."
    )
    assert failure(503).hint == ("The agent failed. Retry later (after a few seconds).")
    long = failure(500, b'{"message": "' + b"m" * 400 + b'"}')
    assert long.message == 'The agent answered HTTP 500: "' + "m" * 299 + '…"'


def test_a_cut_short_error_body_is_not_read_as_json() -> None:
    cut = qa.AgentReply(500, {"content-type": "application/json"}, b'{"message": "boom"}', True)
    failure = refusal(qa.interpret, cut, purchase(), PAYER, "u")
    assert failure.message == "The agent answered HTTP 500"


def test_answers_are_decoded_leniently_and_cut_answers_stay_text() -> None:
    garbled = qa.interpret(reply(200, b"ok \xff"), purchase(), PAYER, "u")
    assert garbled["answer"] == "ok \ufffd"
    listed = qa.interpret(reply(200, b"  [1, 2]"), purchase(), PAYER, "u")
    assert listed["answer"] == [1, 2]
    cut = qa.AgentReply(200, {"content-type": "application/json"}, b'{"a": 1}', True)
    result = qa.interpret(cut, purchase(), PAYER, "u")
    assert result["answer"] == '{"a": 1}'
    assert any("cut short" in w for w in result["warnings"])
    assert result["warnings"][-1] == (
        "The agent sent no payment receipt: its settlement failed or it does not report one."
    )


def test_402_guidance_word_for_word() -> None:
    plans = [{"planId": f"p{n}"} for n in range(2, 14)]
    failure = refusal(
        qa.interpret,
        reply(402, payment_required=b64({"error": "e" * 400, "accepts": plans})),
        purchase(),
        PAYER,
        "u",
    )
    # what it cost is added by the tool after reading the balance back (test_query_buyer)
    assert failure.message == 'The agent refused the payment: "' + "e" * 299 + '…"'
    assert failure.hint == (
        "The agent accepts plan(s) p2, p3, p4, p5, p6, p7, p8, p9, p10, p11: order it with "
        "svc_orderPlan, then call svc_queryAgent again with planId p2. A token can also buy "
        "the plan by itself when credits run short (automatic top-up), charged to its "
        "delegation and bounded by its spending limit (defaultSpendingLimitCents)."
    )
    bare = refusal(qa.interpret, reply(402, b"{}"), purchase(), PAYER, "u")
    assert bare.message == "The agent refused the payment"
    assert bare.hint == (
        "The agent accepts plan(s) not stated: order it with svc_orderPlan, then call "
        "svc_queryAgent again. " + qa.TOP_UP
    )
    card = refusal(
        qa.interpret,
        reply(402, payment_required=b64({"accepts": [{"scheme": "svc:card-delegation"}]})),
        purchase(),
        PAYER,
        "u",
    )
    assert "pay by card with svc_orderFiatPlan (then paymentType fiat), then" in card.hint


def test_receipt_problems_word_for_word() -> None:
    raw = {"success": False, "creditsRedeemed": "x", "remainingBalance": "1", "payer": PAYER}
    _, problems = qa.check_receipt(raw, PAYER)
    assert problems == [
        "The agent's receipt does not report a successful settlement.",
        "The agent's receipt gives creditsRedeemed as 'x', not a whole number of credits; ignored.",
    ]


async def test_an_announced_oversized_answer_says_the_limit_and_what_to_do() -> None:
    def unused(request: httpx.Request) -> httpx.Response:
        raise AssertionError("the card already said")

    big = FoundCard({"maxAnswerBytes": qa.MAX_ANSWER_BYTES + 1}, "c")
    async with httpx.AsyncClient(transport=httpx.MockTransport(unused)) as http:
        failure = await async_refusal(qh.check_answer_size, http, "https://a.example/x", big)
    assert failure.message == (
        f"The agent says its answer is {qa.MAX_ANSWER_BYTES + 1} bytes, more than the 1024 KiB "
        "svc_queryAgent reads; nothing was paid"
    )
    assert failure.hint == "Ask for a shorter answer, or call the agent another way."


async def test_the_prompt_goes_with_the_token_and_a_long_answer_is_marked_cut() -> None:
    seen: list[httpx.Request] = []

    def agent(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, content=b"z" * (qa.MAX_ANSWER_BYTES + 10))

    async with httpx.AsyncClient(transport=httpx.MockTransport(agent)) as http:
        answer = await qh.post_prompt(http, "https://a.example/x", {"prompt": "hi"}, "tok")
    assert answer.truncated is True and len(answer.body) <= qa.MAX_ANSWER_BYTES
    assert seen[0].method == "POST"
    assert seen[0].headers["payment-signature"] == "tok"
    assert seen[0].headers["accept"] == "application/json"


class _Minter:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    async def get_access_token(self, plan_id: str, **kw: Any) -> str:
        self.calls.append({"plan_id": plan_id, **kw})
        return "tok"


async def test_the_token_asked_for_is_bound_to_the_url_and_verb_with_the_configured_limits() -> (
    None
):
    minter = _Minter()
    config = PluginConfig(defaultDelegationDurationSecs=1234)
    core = cast(PluginCore, SimpleNamespace(client=lambda: minter, config=config, approvals=None))
    params = q.QueryAgentParams.model_validate({"agentUrl": "https://a.example/x", "prompt": "p"})
    ticket = model_ticket(config, "query", "p1")  # "model" mode: the gateway's own delegation
    assert await qt.mint(core, params, purchase(), ticket) == "tok"
    (call,) = minter.calls
    assert call["plan_id"] == "p1" and call["agent_id"] == "a1"
    assert call["resource_url"] == "https://a.example/x" and call["http_verb"] == "POST"
    assert call["duration_secs"] == 1234
    assert call["spending_limit_cents"] == config.default_spending_limit_cents
    assert call["max_transactions"] is None  # pooled, as in "model" mode


async def test_a_failed_balance_read_says_so_word_for_word() -> None:
    from tests.buying.test_query_parts import stub_core

    result: dict[str, Any] = {"receipt": None}
    await qo.balance_after(stub_core(ServiceError("down", status=503)), "p1", result)
    assert result["warnings"] == ["Could not read your balance from the service after the call."]


async def test_a_refused_mint_says_which_url_and_what_to_use() -> None:
    from tests.buying.test_query_parts import stub_core

    params = q.QueryAgentParams.model_validate({"agentUrl": "https://a.example/x", "prompt": "p"})
    refused = ServiceError("no", status=400, code="BCK.PROTOCOL.0031")
    ticket = model_ticket(PluginConfig(), "query", "p1")
    failure = await async_refusal(qt.mint, stub_core(refused), params, purchase(), ticket)
    assert failure.message == (
        "The service refused a token for https://a.example/x: it is not a registered endpoint "
        "of agent a1; nothing was paid"
    )
    assert failure.hint == "Use the URL the agent registered."
