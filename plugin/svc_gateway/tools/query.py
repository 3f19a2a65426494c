"""svc_queryAgent: buy one answer from a paid agent (card check, token, POST, receipt).

Order matters: the URL is checked first (a token must never travel in clear text to a remote
host), then the agent card (never pay an agent that is not the one named), and only then is
a token minted and sent. No card at all is a warning, not a refusal: SPEC.md says the card
"should" confirm the agent, many agents have none, and verify still protects the payer.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import ssl
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx
from pydantic import Field

from ..agent_card import CardRejected, TooLarge, check_card, fetch_card, read_limited
from ..core import PluginCore
from ..encoding import decode_b64_json
from ..errors import ServiceError
from ..models import SCHEME_CARD, SCHEME_CRYPTO
from ..redact import get_logger
from .base import Params, ToolFailure, require_agent, require_plan, tool

log = get_logger("svc_gateway.tools.query")

#: the largest agent answer read; past it the read stops and the tool reports an error
MAX_ANSWER_BYTES = 1024 * 1024
#: the longest text answer returned to the model (a JSON answer is returned whole)
MAX_TEXT_CHARS = 20_000
_LOOPBACK_NAMES = ("localhost", "localhost.")


class QueryAgentParams(Params):
    agent_url: str = Field(
        alias="agentUrl",
        pattern=r"^https?://",
        max_length=2048,
        description="The agent's paid endpoint URL; HTTPS unless it is on this machine",
    )
    prompt: str = Field(min_length=1, max_length=20000, description="What to ask the agent")
    plan_id: str | None = Field(
        default=None, alias="planId", description="Plan to pay with; defaults to planId"
    )
    agent_id: str | None = Field(
        default=None,
        alias="agentId",
        description="Agent id to pay; defaults to agentId, else the id on the agent's card",
    )
    payment_type: Literal["crypto", "fiat"] | None = Field(
        default=None,
        alias="paymentType",
        description="crypto, or fiat to pay by card; defaults to the plan's kind, then config",
    )
    payment_method_id: str | None = Field(
        default=None, alias="paymentMethodId", description="Card for fiat payments"
    )


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context for every query: building one costs ~50 ms of blocked event loop."""
    return httpx.create_ssl_context()


def is_loopback_host(host: str | None) -> bool:
    """127.0.0.0/8, ::1 and localhost: traffic that never leaves this machine."""
    if not host:
        return False
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_agent_url(url: str) -> None:
    """Refuse plain HTTP to a remote host: the payment token is a bearer credential."""
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return
    if parts.scheme == "http" and is_loopback_host(parts.hostname):
        return
    raise ToolFailure(
        "insecure_agent_url",
        f"Refusing to send a payment token to {parts.scheme}://{parts.hostname or '?'}: plain "
        "HTTP would expose it (a bearer credential) to anyone on the network",
        "Use the agent's https:// URL (plain http is allowed only for 127.0.0.1/localhost).",
    )


async def _payment_type(core: PluginCore, plan_id: str, given: str | None) -> str:
    """The parameter, else the plan's own kind, else config ``paymentType``. The plan wins over
    config because the service refuses a card token for a crypto plan and vice versa."""
    if given:
        return given
    try:
        plan = await core.public_client().get_plan(plan_id)
    except ServiceError:
        return core.config.payment_type
    return "fiat" if plan.scheme == SCHEME_CARD else "crypto"


@tool(
    "svc_queryAgent",
    "Send a prompt to a paid agent, paying with an x402 access token; checks the agent card "
    "first, then returns the answer and the receipt (credits redeemed, remaining balance).",
    QueryAgentParams,
)
async def query_agent(core: PluginCore, p: QueryAgentParams) -> dict[str, Any]:
    check_agent_url(p.agent_url)
    plan_id = require_plan(core, p.plan_id)
    client = core.client()  # NotLoggedIn before any traffic
    payment_type = await _payment_type(core, plan_id, p.payment_type)
    scheme = SCHEME_CARD if payment_type == "fiat" else SCHEME_CRYPTO
    timeout = httpx.Timeout(core.config.request_timeout_secs)
    async with httpx.AsyncClient(timeout=timeout, verify=_tls(), follow_redirects=False) as http:
        try:
            verdict = check_card(
                await fetch_card(http, p.agent_url),
                agent_id=require_agent(core, p.agent_id),
                plan_id=plan_id,
                scheme=scheme,
                agent_url=p.agent_url,
            )
        except CardRejected as exc:
            raise ToolFailure(exc.code, exc.message, exc.hint) from None
        token = await client.get_access_token(
            plan_id,
            agent_id=verdict.agent_id,
            payment_type=payment_type,
            payment_method_id=p.payment_method_id,
            spending_limit_cents=core.config.default_spending_limit_cents,
            duration_secs=core.config.default_delegation_duration_secs,
        )
        try:
            status, headers, body = await _post(http, p.agent_url, p.prompt, token)
        finally:
            core.spent(plan_id)  # the request may have been charged whatever we read back
    result = _interpret(status, headers, body, plan_id, verdict.agent_id)
    result.update({"planId": plan_id, "agentId": verdict.agent_id, "agentUrl": p.agent_url})
    warnings = [*verdict.warnings, *result.pop("warnings", [])]
    if warnings:
        result["warnings"] = warnings
    return result


async def _post(
    http: httpx.AsyncClient, url: str, prompt: str, token: str
) -> tuple[int, httpx.Headers, bytes]:
    try:
        async with http.stream(
            "POST",
            url,
            json={"prompt": prompt},
            headers={"payment-signature": token, "Accept": "application/json"},
        ) as response:
            body = await read_limited(response, MAX_ANSWER_BYTES)
            return response.status_code, response.headers, body
    except TooLarge:
        raise ToolFailure(
            "answer_too_large",
            f"The agent's answer is larger than {MAX_ANSWER_BYTES // 1024} KiB; reading stopped",
            "The request may have been charged; check the balance with svc_checkBalance.",
        ) from None
    except httpx.TimeoutException:
        raise ToolFailure(
            "agent_timeout",
            "The agent did not answer in time",
            "It may still have charged the request: check svc_checkBalance before retrying; "
            "raise requestTimeoutSecs for slow agents.",
        ) from None
    except httpx.HTTPError as exc:
        raise ToolFailure(
            "agent_unreachable",
            f"Could not reach the agent: {type(exc).__name__}",
            "Check agentUrl and that the agent is running.",
        ) from None


def _answer(headers: httpx.Headers, body: bytes) -> Any:
    """JSON when it parses, else the text (truncated for the model)."""
    text = body.decode("utf-8", errors="replace")
    if "json" in headers.get("content-type", "") or text.lstrip().startswith(("{", "[")):
        try:
            return json.loads(text)
        except ValueError:
            pass
    return text[:MAX_TEXT_CHARS]


def _interpret(
    status: int, headers: httpx.Headers, body: bytes, plan_id: str, agent_id: str | None
) -> dict[str, Any]:
    if status == 402:
        raise _payment_guidance(headers, body, plan_id, agent_id)
    if not 200 <= status < 300:
        detail = _answer(headers, body)
        message = detail.get("message") if isinstance(detail, dict) else None
        raise ToolFailure(
            "agent_error",
            f"The agent answered HTTP {status}"
            + (f": {message}" if isinstance(message, str) else ""),
            "A failed request is not charged; retry later (on 503, after a few seconds).",
        )
    result: dict[str, Any] = {"answer": _answer(headers, body)}
    receipt = decode_b64_json(headers.get("payment-response"))
    if receipt is None:
        result["receipt"] = None
        result["warnings"] = [
            "The agent sent no payment receipt: its settlement failed or it does not report one."
        ]
        return result
    result["receipt"] = {
        "success": receipt.get("success"),
        "creditsRedeemed": str(receipt.get("creditsRedeemed", "")),
        "remainingBalance": str(receipt.get("remainingBalance", "")),
        "transaction": receipt.get("transaction"),
        "network": receipt.get("network"),
        "payer": receipt.get("payer"),
    }
    return result


def _payment_guidance(
    headers: httpx.Headers, body: bytes, plan_id: str, agent_id: str | None
) -> ToolFailure:
    """Turn a 402 and its ``payment-required`` envelope into what to do next."""
    envelope = decode_b64_json(headers.get("payment-required")) or {}
    accepts = [a for a in envelope.get("accepts", []) if isinstance(a, dict)]
    plans = [str(a.get("planId")) for a in accepts if a.get("planId")]
    fiat = any(a.get("scheme") == SCHEME_CARD for a in accepts)
    detail = _answer(headers, body)
    reason = envelope.get("error") or (detail.get("reason") if isinstance(detail, dict) else None)
    order = (
        "pay by card with svc_orderFiatPlan (then paymentType fiat)"
        if fiat
        else "order it with svc_orderPlan"
    )
    accepted = ", ".join(plans) if plans else "not stated"
    hint = f"The agent accepts plan(s) {accepted}: {order}, then call svc_queryAgent again"
    if plans and plan_id not in plans:
        hint += f" with planId {plans[0]}"
    wanted = next(
        (a["extra"].get("agentId") for a in accepts if isinstance(a.get("extra"), dict)), None
    )
    if isinstance(wanted, str) and wanted and wanted != agent_id:
        hint += f" (pass agentId {wanted}: tokens are issued for one agent)"
    return ToolFailure(
        "payment_required",
        "The agent refused the payment"
        + (f": {reason}" if reason else "")
        + "; nothing was charged",
        hint + ".",
    )
