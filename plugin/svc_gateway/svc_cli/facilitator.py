"""``svc facilitator``: verify (a dry run, burns nothing) and settle (burns credits) an access
token against a ``paymentRequired`` envelope, as the agent's owner does for each request."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from ..encoding import decode_b64_json
from ..service.models import PaymentRequirement
from .errors import BadUsage, Refused
from .inputs import bad, json_input, load_model
from .options import global_options
from .session import Session, pass_session

F = TypeVar("F", bound=Callable[..., Any])
PARAMS_HELP = (
    "JSON with paymentRequired (an envelope, e.g. from 'svc x402token build-payment-required'), "
    "x402AccessToken and maxAmount{settle} (file, text or -)."
)


@click.group()
@global_options
def facilitator() -> None:
    """Verify and settle access tokens (the agent owner's side of a paid request)."""


@dataclass(frozen=True)
class Params:
    envelope: PaymentRequirement
    token: str
    max_amount: int | None
    agent_request_id: str | None


def read_params(data: dict[str, Any], *, settle: bool) -> Params:
    allowed = {"paymentRequired", "x402AccessToken", "maxAmount"} | (
        {"agentRequestId"} if settle else set()
    )
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise bad("--params", f"unknown field(s) {', '.join(unknown)}")
    raw = data.get("paymentRequired")
    envelope = decode_b64_json(raw) if isinstance(raw, str) else raw
    if not isinstance(envelope, dict):
        raise bad("--params", "paymentRequired must be a PaymentRequired object (or its base64)")
    model = load_model(PaymentRequirement, envelope, "--params")
    if not model.accepts:
        raise bad("--params", "paymentRequired.accepts names no plan")
    token = data.get("x402AccessToken")
    if not isinstance(token, str) or not token.strip():
        raise bad("--params", "x402AccessToken must be the access token (a string)")
    amount = data.get("maxAmount")
    if amount is not None:
        if isinstance(amount, str) and amount.strip().isdigit():
            amount = int(amount)
        if isinstance(amount, bool) or not isinstance(amount, int) or amount < 0:
            raise bad("--params", "maxAmount must be a whole number of credits")
    request_id = data.get("agentRequestId")
    if request_id is not None and (not isinstance(request_id, str) or not request_id.strip()):
        raise bad("--params", "agentRequestId must be the id verify returned (a string)")
    return Params(model, token.strip(), amount, request_id)


def envelope_of_token(token: str, plan_id: str) -> PaymentRequirement:
    """The ``paymentRequired`` envelope a seller of ``plan_id`` checks ``token`` against: the
    scheme, network, agent, URL and verb the token was issued for (WIRE.md §3)."""
    from ..encoding import decode_access_token, token_authorization

    decoded = decode_access_token(token)
    accepted = decoded.get("accepted") if decoded else None
    if not isinstance(decoded, dict) or not isinstance(accepted, dict):
        raise bad("--token", "this is not an x402 access token (get-x402-access-token prints one)")
    raw_extra = accepted.get("extra")
    extra: dict[str, Any] = {"version": "1"}
    if isinstance(raw_extra, dict) and isinstance(raw_extra.get("agentId"), str):
        extra["agentId"] = raw_extra["agentId"]
    verb = token_authorization(decoded).get("httpVerb")
    if isinstance(verb, str) and verb:
        extra["httpVerb"] = verb.upper()
    resource = decoded.get("resource")
    url = resource.get("url") if isinstance(resource, dict) else None
    envelope = {
        "x402Version": 2,
        "resource": {"url": url if isinstance(url, str) else ""},
        "accepts": [
            {
                "scheme": accepted.get("scheme"),
                "network": accepted.get("network"),
                "planId": plan_id,
                "extra": extra,
            }
        ],
        "extensions": {},
    }
    return load_model(PaymentRequirement, envelope, "--token")


def call_of(
    params: dict[str, Any] | None,
    token: str | None,
    plan_id: str | None,
    max_amount: int | None,
    request_id: str | None,
    *,
    settle: bool,
) -> Params:
    """The call from ``--params``, or from ``--token`` and ``--plan`` (never both)."""
    flags = {"--token": token, "--plan": plan_id, "--max-amount": max_amount}
    if settle:
        flags["--agent-request-id"] = request_id
    given = [flag for flag, value in flags.items() if value is not None]
    if params is not None:
        if given:
            raise BadUsage(f"--params already holds the call: leave out {', '.join(given)}")
        return read_params(params, settle=settle)
    if token is None or plan_id is None:
        raise BadUsage(
            "say what to check: --token TOKEN --plan PLAN_ID (the subscriber's token and your "
            "plan), or --params JSON"
        )
    token = (sys.stdin.readline() if token.strip() == "-" else token).strip()
    if not token:
        raise bad("--token", "the access token is empty")
    if request_id is not None and not request_id.strip():
        raise bad("--agent-request-id", "give the agentRequestId verify returned")
    return Params(envelope_of_token(token, plan_id), token, max_amount, request_id)


def call_options(*, settle: bool) -> Callable[[F], F]:
    """``--params``, or ``--token``, ``--plan`` and ``--max-amount`` (and for settle
    ``--agent-request-id``)."""
    options = [
        click.option(
            "--token",
            metavar="TOKEN",
            help="The subscriber's access token (- reads it from stdin).",
        ),
        click.option("--plan", "plan_id", metavar="PLAN_ID", help="Your plan the token pays."),
        click.option(
            "--max-amount",
            type=click.IntRange(min=0),
            metavar="N",
            help="Credits to check or burn (default: the plan's per-request maximum).",
        ),
    ]
    if settle:
        options.append(
            click.option(
                "--agent-request-id",
                metavar="ID",
                help="The agentRequestId verify returned (a replay then burns nothing more).",
            )
        )
    options.append(
        click.option(
            "--params",
            metavar="JSON",
            callback=json_input,
            help="Instead of the flags above: "
            + PARAMS_HELP.format(
                settle=" and agentRequestId (from verify; makes a replay safe)" if settle else ""
            ),
        )
    )

    def apply(function: F) -> F:
        for option in reversed(options):
            function = option(function)
        return function

    return apply


@facilitator.command("verify-permissions")
@call_options(settle=False)
@global_options
@pass_session
def verify_permissions(
    session: Session,
    token: str | None,
    plan_id: str | None,
    max_amount: int | None,
    params: dict[str, Any] | None,
) -> None:
    """Check a token can pay (burns nothing); exit 1 when it cannot."""
    call = call_of(params, token, plan_id, max_amount, None, settle=False)
    result, answer = session.call(lambda c: c.verify(call.envelope, call.token, call.max_amount))
    if not result.is_valid:
        raise Refused(result.invalid_reason or "the token cannot pay", code="invalid_payment")
    session.output().result(answer)


@facilitator.command("settle-permissions")
@call_options(settle=True)
@global_options
@pass_session
def settle_permissions(
    session: Session,
    token: str | None,
    plan_id: str | None,
    max_amount: int | None,
    agent_request_id: str | None,
    params: dict[str, Any] | None,
) -> None:
    """Burn the credits of one request; the same agentRequestId replays the same transaction."""
    call = call_of(params, token, plan_id, max_amount, agent_request_id, settle=True)
    result, answer = session.call(
        lambda c: c.settle(call.envelope, call.token, call.max_amount, call.agent_request_id)
    )
    if not result.success:
        raise Refused(result.error_reason or "the settlement failed", code="settle_failed")
    session.output().result(answer)
