"""``svc facilitator``: verify (a dry run, burns nothing) and settle (burns credits) an access
token against a ``paymentRequired`` envelope, as the agent's owner does for each request."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import click

from ..encoding import decode_b64_json
from ..service.models import PaymentRequirement
from .errors import Refused
from .inputs import bad, json_input, load_model
from .options import global_options
from .session import Session, pass_session

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


@facilitator.command("verify-permissions")
@click.option(
    "--params",
    metavar="JSON",
    callback=json_input,
    required=True,
    help=PARAMS_HELP.format(settle=""),
)
@global_options
@pass_session
def verify_permissions(session: Session, params: dict[str, Any]) -> None:
    """Check a token can pay (burns nothing); exit 1 when it cannot."""
    call = read_params(params, settle=False)
    result, answer = session.call(lambda c: c.verify(call.envelope, call.token, call.max_amount))
    if not result.is_valid:
        raise Refused(result.invalid_reason or "the token cannot pay", code="invalid_payment")
    session.output().result(answer)


@facilitator.command("settle-permissions")
@click.option(
    "--params",
    metavar="JSON",
    callback=json_input,
    required=True,
    help=PARAMS_HELP.format(settle=" and agentRequestId (from verify; makes a replay safe)"),
)
@global_options
@pass_session
def settle_permissions(session: Session, params: dict[str, Any]) -> None:
    """Burn the credits of one request; the same agentRequestId replays the same transaction."""
    call = read_params(params, settle=True)
    result, answer = session.call(
        lambda c: c.settle(call.envelope, call.token, call.max_amount, call.agent_request_id)
    )
    if not result.success:
        raise Refused(result.error_reason or "the settlement failed", code="settle_failed")
    session.output().result(answer)
