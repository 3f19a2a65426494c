"""svc_queryAgent for an A2A agent: pay it in band with the official a2a-sdk 1.x client.

An agent is an A2A agent when the card at its origin names ``agentUrl`` as one of its
interfaces, or when ``agentUrl`` is the agent's address, where its card is (as every A2A client
starts): then the JSON-RPC interface that card names is paid, under every rule below, the
registered-endpoint one included (:mod:`.a2a_probe`). Anything else is left to the HTTP path
(:class:`NotA2A`), which runs its own checks under its own deadline. The same rules as HTTP and
MCP, in the same order, nothing minted before every check has passed:

1. the URL (HTTPS, or plain HTTP on this machine) and its address (loopback, public or
   allow-listed), before any traffic;
2. the card, resolved with the SDK's ``A2ACardResolver``; its payment extension must agree with
   the service: the agent id it names (or ``agentId``) is an agent the service knows, the
   interface paid (``agentUrl`` from here on) is one of that agent's registered endpoints (an
   impostor serving another agent's id is refused here), and the plan paid with is one the
   agent sells;
3. a v3 token bound to ``agentUrl`` (:func:`..tokens.mint`), sent as ``x402.payment.payload`` in
   the message's metadata with one blocking ``SendMessage`` to ``agentUrl`` only (the client is
   given a card holding that one interface: the SDK posts to whatever URL a card names), with
   our own deadline (the SDK defaults to streaming and 5 s);
4. the reply: a completed task's answer (cut to :data:`.answers.MAX_TEXT_CHARS`, quoted as data
   by the tool layer) with its checked receipt (the extension's ``x402.payment.receipts``), or
   a failure saying what the service shows was charged (:mod:`.charges`).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from ..account.core import PluginCore
from ..chat.failure import ToolFailure
from ..chat.plans import plan_payment_type
from ..encoding import decode_access_token
from ..interop import a2a_x402 as x402
from ..interop.agent_card import ID_LIMIT
from ..redact import get_logger
from ..safe_text import one_line, quoted
from .a2a_probe import (
    CARD_PATH,
    PROBE_SECS,
    Interface,
    NotA2A,
    a2a_interface,
    named_interface,
    origin_of,
    probe,
    same_url,
)
from .addresses import check_agent_address, check_agent_url
from .answers import MAX_ANSWER_BYTES, MAX_TEXT_CHARS, Purchase, check_receipt
from .approval import finish_ticket, query_ticket, redeemed, topped_up
from .capped import capped_transport, too_large_failure
from .charges import HTTPX_SLACK_SECS, Step, balance_after, read_balance, timed_out, with_charge
from .purchase import agent_document, agent_plan_ids, is_registered, registered_endpoints
from .request import AgentQuery, AtUrl
from .retrying import IDEMPOTENCY_META, MAX_ATTEMPTS, new_key, with_retries
from .tokens import mint, token_version

if TYPE_CHECKING:
    import httpx

__all__ = ["CARD_PATH", "NotA2A", "a2a_interface", "named_interface", "query_a2a_agent"]

log = get_logger("svc_gateway.tools.query")


class _SdkTimeout(TimeoutError):
    """The A2A SDK gave up waiting: its timeout is what was left of the query's deadline."""


#: the environment a2a-sdk 1.x needs: payments-py pins a2a-sdk 0.3, both ship the package ``a2a``
_OWN_VENV = (
    "Run the gateway from a virtual environment of its own with the plugin's a2a extra and "
    "without payments-py (the test extra pins a2a-sdk 0.3; the two majors cannot share one): "
    "python -m venv .venv-a2a && .venv-a2a/bin/pip install -e '.[a2a]' (from a checkout)."
)


def _installed_a2a() -> str | None:
    """The installed a2a-sdk's version, ``None`` when there is none."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("a2a-sdk")
    except PackageNotFoundError:
        return None


def _sdk() -> Any:
    """The a2a-sdk 1.x client names, or a failure saying which environment to run in."""
    import importlib

    try:
        importlib.import_module("a2a.helpers")  # new in 1.x: a2a-sdk 0.3 lacks it
    except ImportError:
        found = _installed_a2a()
        raise ToolFailure(
            "a2a_unavailable",
            "This agent speaks A2A, and paying it needs a2a-sdk 1.x"
            + (f"; this environment has a2a-sdk {one_line(found, 20)}" if found else "")
            + "; nothing was paid",
            _OWN_VENV,
        ) from None
    import a2a.client
    import a2a.types

    return a2a


async def query_a2a_agent(
    core: PluginCore, p: AgentQuery, until: float | None = None
) -> dict[str, Any]:
    """svc_queryAgent for an A2A agent; :class:`NotA2A` (before any token exists) when
    ``agentUrl`` is not an A2A interface. ``until`` (loop time): the query's one deadline,
    shared with the HTTP path that follows a :class:`NotA2A` (default: requestTimeoutSecs
    from now)."""
    check_agent_url(p.agent_url)
    core.client()  # NotLoggedIn before any traffic
    deadline = core.config.request_timeout_secs
    if until is None:
        until = asyncio.get_running_loop().time() + deadline
    found = await probe(core, p.agent_url, min(PROBE_SECS, deadline), until)
    if not p.prompt.strip():
        raise ToolFailure("invalid_params", "prompt is required", "Pass what to ask the agent.")
    if not same_url(found.url, p.agent_url):  # the address of the agent: pay the interface named
        check_agent_url(found.url)
        p = AtUrl.of(p, found.url)
    step = Step()
    try:
        answer = await _query(core, p, step, until, found)
    except BaseException:
        await finish_ticket(core, step, None)
        raise
    await finish_ticket(core, step, redeemed(answer), topped_up(answer))
    return answer


async def _query(
    core: PluginCore, p: AgentQuery, step: Step, until: float, found: Interface
) -> dict[str, Any]:
    """The query once the probe found an A2A interface: what its docstring says, paid through
    the gate's ticket."""
    client = core.client()
    deadline = core.config.request_timeout_secs
    scope = asyncio.timeout_at(until)  # ONE deadline: the probe, DNS, the card, service, send
    try:
        async with scope:
            purchase, token, reply = await _buy(core, p, step, scope, found)
            completed = _sdk().types.TaskState.TASK_STATE_COMPLETED
            answer = _interpret(reply, client.address, purchase, completed)
    except TimeoutError:
        # the scope's, or the SDK's own (:class:`_SdkTimeout`, set to what is left of the
        # deadline: it is the same deadline); nothing else inside raises TimeoutError
        failure = timed_out(step, deadline, p.agent_url)
        if step.token_sent:
            failure = await with_charge(core, step, failure, answered=False)
        raise failure from None
    except _Answered as answered:
        raise await with_charge(core, step, answered.failure, answered=True) from None
    except ToolFailure as failure:
        if step.token_sent:
            raise await with_charge(core, step, failure, answered=False) from None
        raise
    finally:
        step.done(core)
    answer["agentUrl"] = p.agent_url
    answer["tokenVersion"] = token_version(token)
    if step.retries:  # the answer came from a retry (the first send was lost in flight)
        answer["retries"] = step.retries
    await balance_after(core, purchase.plan_id, answer, step.balance_before)
    core.paid_for(f"agent {purchase.agent_id}", purchase.plan_id, answer.get("receipt"))
    warnings = [*purchase.warnings, *answer.pop("warnings", [])]
    if warnings:
        answer["warnings"] = warnings
    log.info("paid A2A agent %s", purchase.agent_id)
    return answer


class _Answered(Exception):
    """The agent answered the paid message without an answer (it will not settle later)."""

    def __init__(self, failure: ToolFailure) -> None:
        super().__init__(failure.message)
        self.failure = failure


async def _buy(
    core: PluginCore, p: AgentQuery, step: Step, scope: asyncio.Timeout, found: Interface
) -> tuple[Purchase, str, Any]:
    import httpx

    timeout = httpx.Timeout(core.config.request_timeout_secs + HTTPX_SLACK_SECS)

    async def too_large(response: httpx.Response) -> None:
        size = response.headers.get("content-length", "")
        if size.isdigit() and int(size) > MAX_ANSWER_BYTES:
            raise too_large_failure(size)

    async with httpx.AsyncClient(
        timeout=timeout,
        follow_redirects=False,
        event_hooks={"response": [too_large]},
        transport=capped_transport(MAX_ANSWER_BYTES),
    ) as http:
        step.waiting = "agent"
        sdk = _sdk()
        if origin_of(p.agent_url) != origin_of(found.card_base):  # a host the probe did not check
            await check_agent_address(core, p.agent_url)
        try:
            card = await sdk.client.A2ACardResolver(http, found.card_base).get_agent_card()
        except sdk.client.A2AClientError as exc:
            raise ToolFailure(
                "agent_card_invalid",
                f"The agent's A2A card at {found.card_base}{CARD_PATH} does not resolve "
                f"({type(exc).__name__}); nothing was paid",
                "Check agentUrl, or ask the agent's owner to fix its card.",
            ) from None
        step.waiting = "service"
        purchase = await _decide(core, p, card, found.card_base)
        step.plan_id = purchase.plan_id
        step.ticket = ticket = await query_ticket(
            core, purchase.plan_id, purchase.agent_id, lambda: query_a2a_agent(core, p)
        )
        token, step.balance_before = await asyncio.gather(
            mint(core, p, purchase, ticket), read_balance(core, purchase.plan_id)
        )
        step.waiting, step.token_sent = "agent", True
        key = new_key()  # one per query: every send of it carries it (as its message id too)

        def lost(exc: BaseException) -> bool:  # the connection dropped before any answer
            return isinstance(exc, ToolFailure) and exc.code == "agent_unreachable"

        retried = await with_retries(
            lambda: _send(sdk, http, card, p, token, scope, key),
            lost=lost,
            attempts=MAX_ATTEMPTS if token_version(token) >= 3 else 1,
        )
        step.retries = retried.attempts - 1
    return purchase, token, retried.value


def _params(card: Any) -> dict[str, Any]:
    from google.protobuf.json_format import MessageToDict

    for extension in card.capabilities.extensions:
        if extension.uri == x402.X402_EXTENSION:
            return dict(MessageToDict(extension.params))
    return {}


async def _decide(core: PluginCore, p: AgentQuery, card: Any, where: str) -> Purchase:
    """The card's payment extension (of the card at ``where``) against the service's record of
    the agent; ``p.agent_url`` is the interface paid."""
    params = _params(card)
    named = params.get("agentId") if isinstance(params.get("agentId"), str) else None
    if not params:
        raise ToolFailure(
            "agent_card_unpaid",
            f"The A2A card at {where} declares no x402 payment extension; nothing was paid",
            "This agent does not sell through the Agent Payments Service.",
        )
    if p.agent_id and named and named != p.agent_id:
        raise ToolFailure(
            "agent_mismatch",
            f"The A2A card names agent {one_line(named, ID_LIMIT)}, not {p.agent_id}; nothing "
            "was paid",
            "Check agentUrl and agentId: you may be talking to a different agent.",
        )
    agent_id = p.agent_id or named
    if not agent_id:
        raise ToolFailure(
            "unknown_agent",
            f"The A2A card at {where} names no agent id; nothing was paid",
            "Pass agentId (the id the agent registered with the service).",
        )
    document = await agent_document(core, agent_id)
    if not is_registered(p.agent_url, registered_endpoints(document), agent_id):
        raise ToolFailure(
            "agent_url_not_registered",
            f"{p.agent_url} is not one of the endpoints agent {agent_id} registered with the "
            "service, so paying it could hand a token to someone else; nothing was paid",
            "Use the A2A interface URL the agent registered.",
        )
    sold = agent_plan_ids(document)
    offered = [str(x) for x in params.get("planIds") or [] if isinstance(x, str)]
    plan_id = p.plan_id or next((x for x in offered if x in sold), None)
    if plan_id is None or plan_id not in sold:
        raise ToolFailure(
            "plan_not_sold",
            f"Agent {agent_id} does not sell "
            + (f"plan {one_line(plan_id, ID_LIMIT)}" if plan_id else "the plans its card names")
            + "; nothing was paid",
            "Pass planId with a plan the agent registered (svc_orderPlan buys one).",
        )
    payment_type = await plan_payment_type(core, plan_id, p.payment_type)
    return Purchase(agent_id, plan_id, payment_type, [])


async def _send(
    sdk: Any,
    http: httpx.AsyncClient,
    card: Any,
    p: AgentQuery,
    token: str,
    scope: asyncio.Timeout,
    key: str,
) -> Any:
    """One blocking send to ``agentUrl`` only, the payment in the message's metadata, the
    query's idempotency ``key`` as its message id and in its metadata."""
    types, client_mod = sdk.types, sdk.client
    only = types.AgentCard()
    only.CopyFrom(card)
    del only.supported_interfaces[:]
    only.supported_interfaces.append(
        types.AgentInterface(url=p.agent_url, protocol_binding="JSONRPC", protocol_version="1.0")
    )
    config = client_mod.ClientConfig(
        streaming=False, httpx_client=http, supported_protocol_bindings=["JSONRPC"]
    )
    client = client_mod.ClientFactory(config).create(only)
    message = types.Message(
        role=types.Role.ROLE_USER,
        message_id=key,
        parts=[types.Part(text=p.prompt)],
        metadata={
            x402.STATUS: x402.PAYMENT_SUBMITTED,
            x402.PAYLOAD: decode_access_token(token),
            IDEMPOTENCY_META: key,
        },
    )
    when = scope.when()
    left = max(0.1, when - asyncio.get_running_loop().time()) if when is not None else None
    context = client_mod.ClientCallContext(
        service_parameters={"A2A-Extensions": x402.X402_EXTENSION}, timeout=left
    )
    replies = client.send_message(types.SendMessageRequest(message=message), context=context)
    try:
        # not streaming: the SDK yields the one reply or raises (an empty result included)
        return await anext(replies)
    except ToolFailure:
        raise
    except Exception as exc:  # the SDK's errors: transport, HTTP status, JSON-RPC error
        if isinstance(exc, client_mod.A2AClientTimeoutError):
            raise _SdkTimeout from None
        answered = (
            getattr(exc, "message", None)
            if not isinstance(exc, client_mod.A2AClientError)
            else None
        )
        failure = ToolFailure(
            "agent_error" if answered else "agent_unreachable",
            f"The A2A agent answered with an error: {quoted(answered, 300)}"
            if answered
            else f"Could not talk A2A to {p.agent_url}: {type(exc).__name__}",
            "Check agentUrl and that the agent is running.",
        )
        raise (_Answered(failure) if answered else failure) from None
    finally:
        await replies.aclose()
        await client.close()


def _interpret(reply: Any, payer: str | None, purchase: Purchase, completed: int) -> dict[str, Any]:
    """The task the agent answered: its answer and checked receipt, or why there is none."""
    from google.protobuf.json_format import MessageToDict

    base = {"agentId": purchase.agent_id, "planId": purchase.plan_id}
    if not reply.HasField("task"):
        raise _Answered(
            ToolFailure(
                "agent_error",
                "The A2A agent answered with a message, not a paid task",
                "A reply without a task carries no receipt.",
            )
        )
    status = reply.task.status
    meta = dict(MessageToDict(status.message.metadata)) if status.HasField("message") else {}
    text = "\n".join(part.text for part in status.message.parts if part.HasField("text"))
    state = status.state
    if state != completed:
        code = meta.get(x402.ERROR)
        if meta.get(x402.STATUS) == x402.PAYMENT_REQUIRED:
            raise _Answered(
                ToolFailure(
                    "payment_required",
                    "The agent refused the payment"
                    + (f" ({one_line(code, 40)})" if isinstance(code, str) else "")
                    + f": {quoted(text, 300)}; its answer was not delivered",
                    f"Order plan {purchase.plan_id} (svc_orderPlan) if you have no credits left, "
                    "then call svc_queryAgent again; svc_checkBalance shows what was charged.",
                )
            )
        raise _Answered(
            ToolFailure(
                "agent_error",
                f"The A2A agent did not complete the task: {quoted(text, 300)}",
                "A task that does not complete delivers nothing.",
            )
        )
    warnings: list[str] = []
    answer: dict[str, Any] = {**base, "answer": text[:MAX_TEXT_CHARS]}
    if len(text) > MAX_TEXT_CHARS:
        warnings.append(
            f"The answer was cut short: only its first {MAX_TEXT_CHARS} characters are shown. "
            "The request was charged."
        )
    receipts = meta.get(x402.RECEIPTS)
    raw = receipts[-1] if isinstance(receipts, list) and receipts else None
    if isinstance(raw, dict):
        normalised = {
            **raw,
            **{k: x402.count(raw.get(k)) for k in ("creditsRedeemed", "remainingBalance")},
        }
        answer["receipt"], problems = check_receipt(normalised, payer)
        warnings.extend(problems)
    else:
        answer["receipt"] = None
        warnings.append("The agent sent no payment receipt (a free call, or it reports none).")
    answer["warnings"] = warnings
    return answer
