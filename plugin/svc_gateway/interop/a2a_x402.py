"""A2A's x402 extension (a2a-x402 v0.2), as plain data: the keys, the card's payment extension.

Shared by the seller's A2A way in and svc_queryAgent's A2A path; imports no SDK. Numbers in A2A
metadata travel as protobuf doubles (``1`` comes back ``1.0``, past 2^53 digits are lost), so
credits and amounts travel as strings and are read back with :func:`count`.
"""

from __future__ import annotations

import re
from typing import Any

from ..encoding import b64url_nopad, compact_json

#: the a2a-x402 extension's URI (activated by listing it in the ``A2A-Extensions`` header)
X402_EXTENSION = "https://github.com/google-agentic-commerce/a2a-x402/blob/main/spec/v0.2"
#: 1.x renamed the activation header; 0.3 clients (payments-py) send the old name
EXTENSION_HEADERS = ("a2a-extensions", "x-a2a-extensions")
#: the x402 token as an HTTP header (payments-py's A2A client; deprecated by the extension)
PAYMENT_HEADER = "payment-signature"

STATUS = "x402.payment.status"
REQUIRED = "x402.payment.required"
PAYLOAD = "x402.payment.payload"
RECEIPTS = "x402.payment.receipts"
ERROR = "x402.payment.error"
#: this seller's own key (not in the v0.2 spec): the payer an unpaid first message is offered
#: to, so its task belongs to that payer from the start (only that payer's token continues it)
PAYER = "x402.payment.payer"

PAYMENT_REQUIRED = "payment-required"
PAYMENT_SUBMITTED = "payment-submitted"
PAYMENT_REJECTED = "payment-rejected"
PAYMENT_COMPLETED = "payment-completed"
PAYMENT_FAILED = "payment-failed"

#: the extension spec's error codes (``x402.payment.error`` is one of these strings)
INSUFFICIENT_FUNDS = "INSUFFICIENT_FUNDS"
INVALID_SIGNATURE = "INVALID_SIGNATURE"
SETTLEMENT_FAILED = "SETTLEMENT_FAILED"

#: the largest in-band payload read (it is re-encoded into a token, as the MCP way in does)
MAX_PAYLOAD_BYTES = 16 * 1024
_COUNT = re.compile(r"\d{1,78}")


def payment_extension(
    *,
    agent_id: str | None,
    plan_ids: list[str],
    scheme: str,
    network: str,
    credits_per_request: int,
) -> dict[str, Any]:
    """The card's ``capabilities.extensions[]`` entry: the facts the service holds for this
    agent (credits as a string: the card's numbers are doubles)."""
    params: dict[str, Any] = {
        "agentId": agent_id or "",
        "planIds": list(plan_ids),
        "scheme": scheme,
        "network": network,
        "creditsPerRequest": str(credits_per_request),
        "x402Version": "2",
        # a message sent again with its id (or metadata["x402/idempotency-key"]) is answered
        # again, never charged twice (issue 46)
        "idempotencyKey": "messageId",
    }
    return {
        "uri": X402_EXTENSION,
        "description": "Paid per request with the Agent Payments Service (x402 v2 in band)",
        "required": True,
        "params": params,
    }


def token_from_payload(payload: object) -> str | None:
    """``x402.payment.payload`` (a decoded token) re-encoded as the token the flow verifies;
    a string is taken as the token itself; anything else, or too large, is ``"!"`` (refused
    as invalid, unasked). ``None``: no payload."""
    if payload is None:
        return None
    if isinstance(payload, str):
        return payload.strip() or None if len(payload) <= MAX_PAYLOAD_BYTES else "!"
    if isinstance(payload, dict):
        encoded = compact_json(whole_numbers(payload))
        return "!" if len(encoded) > MAX_PAYLOAD_BYTES else b64url_nopad(encoded.encode())
    return "!"


def whole_numbers(value: Any) -> Any:
    """``value`` with every whole float made an int again: metadata is a protobuf ``Struct``,
    whose numbers are doubles, and a token re-encoded with ``2.0`` for ``2`` is another token."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: whole_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [whole_numbers(v) for v in value]
    return value


def count(value: object) -> str | None:
    """A credit count as read back from metadata (``"3"``, ``3`` or ``3.0``), as a decimal
    string; ``None`` when it is not a whole number >= 0."""
    if isinstance(value, float) and value.is_integer() and 0 <= value < 2**53:
        return str(int(value))
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return str(value)
    if isinstance(value, str) and _COUNT.fullmatch(value.strip()):
        return str(int(value.strip()))
    return None


def error_code(reason: str) -> str:
    """The extension's ``x402.payment.error`` code for a refusal reason of the flow."""
    lowered = reason.lower()
    if "insufficient" in lowered or "balance" in lowered or "credits" in lowered:
        return INSUFFICIENT_FUNDS
    return INVALID_SIGNATURE
