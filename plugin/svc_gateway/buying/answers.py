"""svc_queryAgent's reading of an agent's reply: the answer, the receipt, a 402's guidance."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from ..chat.failure import ToolFailure
from ..encoding import decode_b64_json, is_address
from ..interop.agent_card import ID_LIMIT
from ..safe_text import one_line, quoted
from ..service.models import SCHEME_CARD

#: the largest agent answer read; past it the read stops and the answer is returned cut short
MAX_ANSWER_BYTES = 1024 * 1024
#: the longest text answer returned to the model (a JSON answer within the limit is whole)
MAX_TEXT_CHARS = 20_000
#: what automatic top-up means for a buyer, wherever a hint explains paying
TOP_UP = (
    "A token can also buy the plan by itself when credits run short (automatic top-up), "
    "charged to its delegation and bounded by its spending limit (defaultSpendingLimitCents)."
)
_NUMBER = re.compile(r"\d{1,78}")


@dataclass
class Purchase:
    """What the checks settled on: whom to pay, with which plan, and what to tell the user."""

    agent_id: str
    plan_id: str
    payment_type: str
    warnings: list[str] = field(default_factory=list)


@dataclass
class AgentReply:
    status: int
    headers: dict[str, str]
    body: bytes
    truncated: bool


def _answer(headers: dict[str, str], body: bytes, truncated: bool) -> tuple[Any, bool]:
    """JSON when it parses (and is whole), else the text cut for the model; and whether
    anything was cut."""
    text = body.decode("utf-8", errors="replace")
    if not truncated and (
        "json" in headers.get("content-type", "") or text.lstrip().startswith(("{", "["))
    ):
        try:
            return json.loads(text), False
        except (ValueError, RecursionError):
            pass
    return text[:MAX_TEXT_CHARS], truncated or len(text) > MAX_TEXT_CHARS


def _agent_error(status: int, message: str | None, url: str) -> ToolFailure:
    said = f"The agent answered HTTP {status}" + (f": {quoted(message, 300)}" if message else "")
    if 300 <= status < 400:
        hint = (
            "The agent sent the request elsewhere; svc_queryAgent does not follow redirects with "
            "a payment token. Use the agent's registered URL directly."
        )
    elif status in (404, 405, 410):
        hint = (
            f"There is no paid endpoint at {url} (wrong path or method): check agentUrl; "
            "retrying the same URL will not help."
        )
    elif status >= 500:
        hint = "The agent failed. Retry later" + (
            " (after a few seconds)." if status in (502, 503, 504) else "."
        )
    else:
        hint = "The agent refused this request. Check the prompt."
    return ToolFailure("agent_error", said, hint)


def interpret(reply: AgentReply, purchase: Purchase, payer: str | None, url: str) -> dict[str, Any]:
    """An error for 402 and any other non-2xx; the answer and the checked receipt otherwise."""
    status, headers, body = reply.status, reply.headers, reply.body
    if status == 402:
        raise _payment_guidance(headers, body, purchase.plan_id, purchase.agent_id)
    if not 200 <= status < 300:
        detail, _ = _answer(headers, body, reply.truncated)
        message = detail.get("message") if isinstance(detail, dict) else None
        raise _agent_error(status, message if isinstance(message, str) else None, url)
    answer, cut = _answer(headers, body, reply.truncated)
    result: dict[str, Any] = {"answer": answer}
    warnings: list[str] = []
    if cut:
        warnings.append(
            f"The answer was cut short: only its first {MAX_TEXT_CHARS} characters are shown "
            f"(answers are read up to {MAX_ANSWER_BYTES // 1024} KiB). The request was charged."
        )
    raw = decode_b64_json(headers.get("payment-response"))
    if raw is None:
        result["receipt"] = None
        warnings.append(
            "The agent sent no payment receipt: its settlement failed or it does not report one."
        )
    else:
        result["receipt"], problems = check_receipt(raw, payer)
        warnings.extend(problems)
    result["warnings"] = warnings
    return result


def _count(value: object) -> str | None:
    """A credit count as a decimal string, or ``None`` when it is not a whole number ≥ 0."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**78:
        return str(value)
    if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        return str(int(value.strip()))
    return None


def _shown(value: object) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 40 else text[:40] + "..."


def check_receipt(raw: dict[str, Any], payer: str | None) -> tuple[dict[str, Any], list[str]]:
    """The agent's receipt with every field checked: a bad field becomes ``None`` plus a
    warning, so nothing the agent invented reaches the model as a fact."""
    problems: list[str] = []
    receipt: dict[str, Any] = {}
    success = raw.get("success")
    receipt["success"] = success if isinstance(success, bool) else None
    if success is not True:
        problems.append("The agent's receipt does not report a successful settlement.")
    for key in ("creditsRedeemed", "remainingBalance"):
        receipt[key] = _count(raw.get(key))
        if receipt[key] is None:
            problems.append(
                f"The agent's receipt gives {key} as {_shown(raw.get(key))}, not a whole number "
                "of credits; ignored."
            )
    for key in ("transaction", "network"):
        value = raw.get(key)
        ok = isinstance(value, str) and len(value) <= 200 and value.isprintable()
        receipt[key] = value if ok else None
    claimed = raw.get("payer")
    if not is_address(claimed):
        receipt["payer"] = None
        problems.append(f"The agent's receipt names payer {_shown(claimed)}, not an address.")
    elif payer is not None and str(claimed).lower() != payer.lower():
        receipt["payer"] = None
        problems.append(f"The agent's receipt names payer {claimed}, not your account {payer}.")
    else:
        receipt["payer"] = claimed
    receipt["valid"] = not problems
    return receipt, problems


def _payment_guidance(
    headers: dict[str, str], body: bytes, plan_id: str, agent_id: str | None
) -> ToolFailure:
    """Turn a 402 and its ``payment-required`` envelope into what to do next."""
    envelope = decode_b64_json(headers.get("payment-required")) or {}
    raw_accepts = envelope.get("accepts")
    accepts = (
        [a for a in raw_accepts if isinstance(a, dict)] if isinstance(raw_accepts, list) else []
    )
    plans = [one_line(a.get("planId"), ID_LIMIT) for a in accepts if a.get("planId")]
    fiat = any(a.get("scheme") == SCHEME_CARD for a in accepts)
    detail, _ = _answer(headers, body, False)
    reason = envelope.get("error") or (detail.get("message") if isinstance(detail, dict) else None)
    if isinstance(detail, dict) and not reason:
        reason = detail.get("reason")
    order = (
        "pay by card with svc_orderFiatPlan (then paymentType fiat)"
        if fiat
        else "order it with svc_orderPlan"
    )
    accepted = ", ".join(plans[:10]) if plans else "not stated"
    hint = f"The agent accepts plan(s) {accepted}: {order}, then call svc_queryAgent again"
    if plans and plan_id not in plans:
        hint += f" with planId {plans[0]}"
    wanted = next(
        (a["extra"].get("agentId") for a in accepts if isinstance(a.get("extra"), dict)), None
    )
    if isinstance(wanted, str) and wanted and wanted != agent_id:
        hint += f" (pass agentId {one_line(wanted, ID_LIMIT)}: tokens are issued for one agent)"
    return ToolFailure(
        "payment_required",
        "The agent refused the payment" + (f": {quoted(reason, 300)}" if reason else ""),
        hint + f". {TOP_UP}",
    )
