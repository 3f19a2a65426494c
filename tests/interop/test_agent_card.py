"""The agent card: where it is looked for, what is read from it, and what refuses a payment."""

from __future__ import annotations

import httpx
import pytest

from svc_gateway.interop.agent_card import (
    CARD_MAX_BYTES,
    CardRejected,
    FoundCard,
    build_card,
    card_urls,
    check_card,
    fetch_card,
)

URL = "https://a.example/svc/agent"
CRYPTO = "svc:erc4337"


def found(**card: object) -> FoundCard:
    return FoundCard(dict(card), URL + "/.well-known/agent.json")


def test_card_urls_own_path_then_root() -> None:
    assert card_urls(URL + "/") == [
        "https://a.example/svc/agent/.well-known/agent.json",
        "https://a.example/.well-known/agent.json",
    ]
    assert card_urls("https://a.example") == ["https://a.example/.well-known/agent.json"]


def test_build_card_states_the_answer_limit_only_when_given() -> None:
    kw = dict(
        name="n",
        description=None,
        agent_id="a",
        plan_id="p",
        url=URL,
        scheme=CRYPTO,
        network="eip155:84532",
        credits_per_request=2,
    )
    assert "maxAnswerBytes" not in build_card(**kw)  # type: ignore[arg-type]
    assert build_card(**kw, max_answer_bytes=10)["maxAnswerBytes"] == 10  # type: ignore[arg-type]


def test_check_card_verdicts() -> None:
    none = check_card(None, agent_id="a", plan_id="p", scheme=CRYPTO, agent_url=URL)
    assert none.agent_id == "a" and "No agent card" in none.warnings[0]
    bare = check_card(found(name="x"), agent_id=None, plan_id="p", scheme=CRYPTO, agent_url=URL)
    assert "no payment fields" in bare.warnings[0]
    card = found(agentId="a2", schemes=[CRYPTO, 5], planId="p9", url="https://b.example/")
    verdict = check_card(card, agent_id=None, plan_id="p", scheme=CRYPTO, agent_url=URL)
    assert verdict.agent_id == "a2"
    assert any("plan p9" in w for w in verdict.warnings)
    assert any("https://b.example/" in w for w in verdict.warnings)
    with pytest.raises(CardRejected) as other:
        check_card(card, agent_id="a1", plan_id="p", scheme=CRYPTO, agent_url=URL)
    assert other.value.code == "agent_mismatch"
    with pytest.raises(CardRejected) as scheme:
        check_card(
            found(agentId="a2", schemes="svc:erc4337"),
            agent_id=None,
            plan_id="p",
            scheme=CRYPTO,
            agent_url=URL,
        )
    assert scheme.value.code == "scheme_not_accepted"
    assert "no payment scheme" in scheme.value.message


async def test_fetch_card_skips_what_is_not_a_card() -> None:
    answers = {
        "/svc/agent/.well-known/agent.json": httpx.Response(200, content=b"[1, 2]"),
        "/.well-known/agent.json": httpx.Response(200, json={"agentId": "root"}),
    }

    def serve(request: httpx.Request) -> httpx.Response:
        return answers[request.url.path]

    async with httpx.AsyncClient(transport=httpx.MockTransport(serve)) as http:
        card = await fetch_card(http, URL)
    assert card is not None and card.card == {"agentId": "root"}
    assert card.url == "https://a.example/.well-known/agent.json"

    bad = {
        "/svc/agent/.well-known/agent.json": httpx.Response(200, content=b"{not json"),
        "/.well-known/agent.json": httpx.Response(200, content=b" " * (CARD_MAX_BYTES + 1)),
    }

    def serve_bad(request: httpx.Request) -> httpx.Response:
        return bad[request.url.path]

    async with httpx.AsyncClient(transport=httpx.MockTransport(serve_bad)) as http:
        assert await fetch_card(http, URL) is None

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    async with httpx.AsyncClient(transport=httpx.MockTransport(refuse)) as http:
        assert await fetch_card(http, URL) is None
