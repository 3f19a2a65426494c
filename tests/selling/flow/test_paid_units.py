"""The paid endpoint's building blocks, one behaviour each: handler loading, the settle queue
file, plan facts and the credit book. Fast, in-process tests (no HTTP) for the edges the
end-to-end tests do not reach."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web
from aiohttp.http_exceptions import LineTooLong
from aiohttp.payload import StringPayload

from svc_gateway import register
from svc_gateway.account.credentials import CredentialStore
from svc_gateway.config import ConfigError
from svc_gateway.hosts.reference import ReferenceGateway
from svc_gateway.selling.flow.plans import PlanFacts, PlanFactsCache
from svc_gateway.selling.handlers import (
    Answer,
    HandlerError,
    default_handler,
    load_handler,
    to_answer,
)
from svc_gateway.selling.state.settle_journal import SettleJournal
from svc_gateway.selling.state.settle_queue import PendingSettle
from svc_gateway.selling.ways_in.endpoint import ProtocolLog
from svc_gateway.selling.ways_in.http import paid_response
from svc_gateway.service.errors import NotFound
from svc_gateway.service.models import SCHEME_CARD, SCHEME_CRYPTO, Plan
from tests.support import LogCollector

PAYER = "0x" + "aa" * 20


def entry(n: int, queued_at: float = 1000.0, amount: int = 1) -> PendingSettle:
    return PendingSettle(f"r{n}", "plan-1", PAYER, amount, f"tok{n}", {"x402Version": 2}, queued_at)


# -- agentHandler loading --------------------------------------------------------------------


def test_load_handler_follows_a_dotted_attribute_path() -> None:
    assert load_handler("os:path.join") is os.path.join


def test_load_handler_import_error_names_the_failure_kind() -> None:
    with pytest.raises(ConfigError) as raised:
        load_handler("no_such_module_x:f")
    assert "(ModuleNotFoundError)" in str(raised.value)


def test_invalidating_a_plan_never_cached_is_harmless() -> None:
    cache = PlanFactsCache()
    cache.invalidate("never-read")
    assert cache.peek("never-read") is None


# -- handler answers ---------------------------------------------------------------------------


def test_a_streaming_response_payload_is_refused_with_the_whole_reason() -> None:
    streamed = web.Response()
    streamed.body = StringPayload("x")
    with pytest.raises(HandlerError) as raised:
        to_answer(streamed)
    assert str(raised.value) == "a Response with a streaming payload cannot be paid for"


# -- mounting on a host's web app ----------------------------------------------------------------


def mounting_gateway(
    app: web.Application, config: dict[str, Any] | None = None, **extra: Any
) -> ReferenceGateway:
    gateway = ReferenceGateway(
        {
            "environment": "local",
            "baseUrl": "http://127.0.0.1:9/api/v1",  # never called: mounting makes no call
            "enablePaidEndpoint": True,
            "planId": "plan-1",
            **(config or {}),
        },
        http_app=app,
    )
    for name, value in extra.items():
        setattr(gateway, name, value)
    return gateway


def test_a_host_base_url_names_the_mounted_endpoint_and_its_card(tmp_path: Path) -> None:
    app = web.Application()
    gateway = mounting_gateway(app, http_base_url="http://agents.test:8080/")
    handle = register(gateway, store=CredentialStore(tmp_path, use_keyring=False))
    try:
        endpoint = handle.extras["paid_endpoint"]
        assert endpoint.mounted
        assert endpoint.url == "http://agents.test:8080/svc/agent"
        assert endpoint.card_url == "http://agents.test:8080/svc/agent/.well-known/agent.json"
        assert endpoint.plan_id == "plan-1" and endpoint.stats.requests == 0
    finally:
        handle.close()


def test_a_running_host_app_error_says_to_register_first(tmp_path: Path) -> None:
    app = web.Application()
    app.freeze()  # as a host that already serves it
    gateway = mounting_gateway(app)
    with pytest.raises(ConfigError) as raised:
        register(gateway, store=CredentialStore(tmp_path, use_keyring=False))
    message = str(raised.value)
    assert message.startswith("the host's http_app is already running")
    assert message.endswith("register the plugin before the host starts its web app")


async def test_a_mounted_card_says_unavailable_on_a_fault_and_shutting_down_after_close(
    tmp_path: Path,
) -> None:
    app = web.Application()
    gateway = mounting_gateway(app)
    store = CredentialStore(tmp_path, use_keyring=False)
    handle = await asyncio.to_thread(register, gateway, store=store)
    closed = False
    runner = web.AppRunner(app)  # the host serves its app on its own loop (this one)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        base = f"http://127.0.0.1:{runner.addresses[0][1]}/svc/agent"

        async def broken(plan_id: str) -> Any:
            raise RuntimeError("a bug while reading " + plan_id)

        async def crashing(prompt: str, token: str | None, url: str, connected: Any = None) -> Any:
            raise RuntimeError("a bug while serving " + prompt)

        flow = handle.extras["paid_endpoint"].flow
        flow.facts, flow.serve = broken, crashing
        async with httpx.AsyncClient(timeout=20) as http:
            faulty = await http.get(base + "/.well-known/agent.json")
            assert faulty.status_code == 500
            assert faulty.json() == {
                "error": "Internal Server Error",
                "message": "The agent card is unavailable.",
            }
            crashed = await http.post(base, json={"prompt": "hi"})
            assert crashed.status_code == 500
            assert crashed.json() == {
                "error": "Internal Server Error",
                "message": "The agent failed; nothing was charged.",
            }
            await asyncio.to_thread(handle.close)
            closed = True
            card = await http.get(base + "/.well-known/agent.json")
            paid = await http.post(base, json={"prompt": "hi"})
        for answer in (card, paid):
            assert answer.status_code == 503
            assert answer.json() == {
                "error": "Service Unavailable",
                "message": "The agent is shutting down.",
            }
    finally:
        await runner.cleanup()
        if not closed:
            await asyncio.to_thread(handle.close)


def test_the_protocol_log_names_a_malformed_request_at_info(all_logs: LogCollector) -> None:
    adapter = ProtocolLog(logging.getLogger("svc_gateway.paid"), {})
    try:
        raise LineTooLong("x" * 10, "8190")
    except LineTooLong:
        adapter.exception("Error handling request")
    assert all_logs.lines[-1].endswith("refused a malformed HTTP request (LineTooLong)")


async def test_the_settle_queue_creates_missing_parent_directories(tmp_path: Path) -> None:
    path = tmp_path / "config" / "svc" / "settle-queue.json"  # two levels that do not exist
    store = await SettleJournal.open(path, clock=lambda: 1000.0)
    await store.add(entry(1))
    await store.aclose()
    again = await SettleJournal.open(path, clock=lambda: 1000.0)
    try:
        assert [e.request_id for e in await again.entries()] == ["r1"]
    finally:
        await again.aclose()


# -- the default agent -----------------------------------------------------------------------------


async def test_the_default_agent_states_facts_about_the_prompt() -> None:
    assert await default_handler({"prompt": "a quick brownish fox"}) == {
        "answer": "Your prompt has 4 words and 20 characters; its longest word is 'brownish'.",
        "wordCount": 4,
        "charCount": 20,
        "echo": "a quick brownish fox",
    }
    one = await default_handler({"prompt": "hi"})
    assert one["answer"] == "Your prompt has 1 word and 2 characters; its longest word is 'hi'."
    assert await default_handler({}) == {
        "answer": "Your prompt has 0 words and 0 characters; its longest word is ''.",
        "wordCount": 0,
        "charCount": 0,
        "echo": "",
    }


# -- plan facts ----------------------------------------------------------------------------------

CARD_PLAN = {
    "id": "card-1",
    "metadata": {
        "main": {"name": "Pro", "description": "answers for a fee"},
        "plan": {"fiatPaymentProvider": "adyen"},
    },
    "registry": {"price": {"isCrypto": False}, "credits": {"minAmount": 2, "maxAmount": 5}},
}


def test_plan_facts_carry_the_card_provider_bounds_and_names() -> None:
    facts = PlanFacts.from_plan(Plan.model_validate(CARD_PLAN), "live")
    assert facts == PlanFacts(
        "card-1",
        SCHEME_CARD,
        "adyen",
        2,
        5,
        "Pro",
        "answers for a fee",
        credits_chain="eip155:8453",
    )


class Fetches:
    """A plan fetch that counts its calls; ``gone`` is unknown, ``slow`` waits for ``gate``."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.gate = asyncio.Event()

    async def __call__(self, plan_id: str) -> Plan:
        self.calls.append(plan_id)
        if plan_id == "gone":
            raise NotFound("gone", status=404)
        if plan_id.startswith("slow"):
            await self.gate.wait()
        return Plan.model_validate({"id": plan_id})


async def test_live_plans_and_their_fallback_are_on_the_live_network() -> None:
    cache, fetch = PlanFactsCache(), Fetches()
    assert (await cache.get("p", fetch, "live")).network == "eip155:8453"
    fallback = await cache.get("gone", fetch, "live")
    assert (fallback.scheme, fallback.network) == (SCHEME_CRYPTO, "eip155:8453")
    assert fallback.plan_id == "gone"


async def test_plan_facts_are_read_again_once_their_ttl_has_passed() -> None:
    now = [0.0]
    cache, fetch = PlanFactsCache(ttl=10.0, clock=lambda: now[0]), Fetches()
    await cache.get("p", fetch, "sandbox")
    now[0] = 9.0
    await cache.get("p", fetch, "sandbox")
    assert fetch.calls == ["p"] and cache.fetches == 1
    now[0] = 10.5
    await cache.get("p", fetch, "sandbox")
    assert fetch.calls == ["p", "p"] and cache.fetches == 2


async def test_past_the_bound_of_shared_fetches_each_miss_fetches_alone() -> None:
    cache, fetch = PlanFactsCache(maxsize=1), Fetches()
    first = asyncio.ensure_future(cache.get("slow-a", fetch, "sandbox"))
    await asyncio.sleep(0)  # slow-a now holds the one shared-fetch slot
    others = [asyncio.ensure_future(cache.get("slow-b", fetch, "sandbox")) for _ in range(2)]
    await asyncio.sleep(0)
    fetch.gate.set()
    await asyncio.gather(first, *others)
    assert fetch.calls.count("slow-a") == 1 and fetch.calls.count("slow-b") == 2


def test_a_public_url_with_a_path_is_the_endpoint_itself(tmp_path: Path) -> None:
    public = {"paidEndpointPublicUrl": "https://agents.example.test/paid/ask"}
    gateway = mounting_gateway(web.Application(), public)
    handle = register(gateway, store=CredentialStore(tmp_path, use_keyring=False))
    try:
        assert handle.extras["paid_endpoint"].url == "https://agents.example.test/paid/ask"
    finally:
        handle.close()


def test_json_answers_keep_non_ascii_text_as_utf8() -> None:
    assert to_answer({"answer": "héllo ☃"}).body == '{"answer":"héllo ☃"}'.encode()


def test_an_unserialisable_answer_names_the_failure_kind() -> None:
    with pytest.raises(HandlerError) as raised:
        to_answer({"x": object()})
    assert str(raised.value) == "the answer is not JSON-serialisable (TypeError)"


def test_a_request_never_costs_negative_credits_even_if_the_plan_says_so() -> None:
    odd = PlanFacts("p", SCHEME_CRYPTO, "eip155:84532", min_amount=-5, max_amount=10)
    assert odd.clamp(-3) == 0 and odd.clamp(4) == 4 and odd.clamp(11) == 10


@pytest.mark.parametrize(
    ("own", "sent"),
    [
        ("private, max-age=30", "private, max-age=30"),  # already private: kept as it is
        ("Private", "Private"),
        ("public, max-age=60", "max-age=60, private"),  # public gives way to private
        ("public", "private"),
        ("public, s-maxage=600, max-age=60", "max-age=60, private"),  # s-maxage: shared caches
    ],
)
def test_a_paid_answers_own_cache_control_stays_private(own: str, sent: str) -> None:
    answer = Answer.json(200, {"ok": True}, {"Cache-Control": own})
    assert paid_response(answer).headers["Cache-Control"] == sent
