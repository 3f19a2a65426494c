"""Error codes and the JSON error envelope ``{code, message, hint?}`` (WIRE.md §8.1).

Handlers raise :class:`ApiError`; one middleware turns it into the answer, so every failure
path speaks the shape the hosted service speaks and clients can rely on ``code``.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

# -- codes the hosted service is known to use (WIRE.md §8.1) ---------------------------------
APIKEY_INVALID = "BCK.APIKEY.0004"
VERSION_UNSUPPORTED = "BCK.VERSION.0001"
PRECISION_LOST = "BCK.COMMON.0026"
FIAT_PRICE_TOO_LOW = "BCK.PROTOCOL.0047"
DELEGATION_EXPIRED = "BCK.X402.0013"
DELEGATION_MISSING = "BCK.X402.0030"
#: The delegation cannot pay (spending limit, maxTransactions, currency) (WIRE.md §4, 403).
DELEGATION_BUDGET = "BCK.X402.0023"
#: An agent endpoint allow-list that matches no ``resource.url`` (Python SDK 1.18 ``Endpoint``).
ENDPOINT_NOT_ALLOWED = "BCK.PROTOCOL.0031"
#: A v3 (single-use) access token settled a second time (``payments_py/x402/errors.py``).
TOKEN_ALREADY_USED = "BCK.X402.0059"
#: MPP is not configured on this deployment (payments_py ``mpp/errors.py``; 501 in the TS SDK).
MPP_NOT_CONFIGURED = "BCK.MPP.0002"

# -- codes of this sandbox (the hosted list is "not shown"; same naming scheme) -------------
MALFORMED_JSON = "BCK.COMMON.0001"
INVALID_FIELD = "BCK.COMMON.0002"
INVALID_QUERY = "BCK.COMMON.0003"
ROUTE_NOT_FOUND = "BCK.COMMON.0004"
METHOD_NOT_ALLOWED = "BCK.COMMON.0005"
BODY_TOO_LARGE = "BCK.COMMON.0013"
INTERNAL = "BCK.COMMON.0500"
PLAN_NOT_FOUND = "BCK.PROTOCOL.0001"
AGENT_NOT_FOUND = "BCK.PROTOCOL.0002"
NOT_OWNER = "BCK.PROTOCOL.0003"
PLAN_NOT_ASSOCIATED = "BCK.PROTOCOL.0004"
INVALID_PRICE = "BCK.PROTOCOL.0010"
INVALID_CREDITS = "BCK.PROTOCOL.0011"
FIAT_PLAN_NEEDS_CHECKOUT = "BCK.PROTOCOL.0012"
CRYPTO_PLAN_NOT_FIAT = "BCK.PROTOCOL.0013"
TRIAL_ALREADY_USED = "BCK.PROTOCOL.0048"
MAX_ORDERS_REACHED = "BCK.PROTOCOL.0049"
CHECKOUT_NOT_FOUND = "BCK.FIAT.0001"
CHECKOUT_EXPIRED = "BCK.FIAT.0002"
PAYMENT_METHOD_NOT_FOUND = "BCK.PAYMENT.0001"
DELEGATION_NEEDS_BROWSER = "BCK.DELEGATION.0001"
DELEGATION_INVALID = "BCK.DELEGATION.0002"
ENVELOPE_INVALID = "BCK.X402.0002"
DELEGATION_NOT_FOUND = "BCK.X402.0032"
DELEGATION_NOT_YOURS = "BCK.X402.0033"
SCHEME_PROVIDER_MISMATCH = "BCK.X402.0034"
SCHEME_PLAN_MISMATCH = "BCK.X402.0035"
AGENT_PLAN_MISMATCH = "BCK.X402.0036"
DELEGATION_OTHER_PLAN = "BCK.X402.0037"
REQUEST_NOT_FOUND = "BCK.X402.0040"
REQUEST_MISMATCH = "BCK.X402.0041"
NO_CREDITS = "BCK.PROTOCOL.0050"
TOKEN_REQUEST_INVALID = "BCK.X402.0043"


class ApiError(Exception):
    """A 4xx the caller caused; its message and hint are safe to show (never a secret)."""

    def __init__(self, status: int, code: str, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.hint = hint

    def body(self) -> dict[str, Any]:
        """``{code, message, hint, httpStatus}``: every error says what to do next."""
        hint = self.hint or DEFAULT_HINTS.get(self.code) or _status_hint(self.status)
        return {"code": self.code, "message": self.message, "hint": hint, "httpStatus": self.status}

    def response(self) -> web.Response:
        return web.json_response(self.body(), status=self.status)


#: The next step for errors raised without a hint of their own, by code.
DEFAULT_HINTS: dict[str, str] = {
    ROUTE_NOT_FOUND: "See GET /docs for the routes this sandbox serves",
    METHOD_NOT_ALLOWED: "See GET /docs for the methods this route takes",
    BODY_TOO_LARGE: "Send a body under 1 MiB",
    INTERNAL: "A sandbox bug: retry once, then report the request that caused it",
    PLAN_NOT_FOUND: "Check the plan id: GET /protocol/plans lists yours, "
    "GET /protocol/agents/{agentId}/plans an agent's",
    AGENT_NOT_FOUND: "Check the agent id: GET /protocol/agents lists yours",
    NOT_OWNER: "Use the API key of the account that owns it",
    PLAN_NOT_ASSOCIATED: "GET /protocol/agents/{agentId}/plans lists the agent's plans",
    DELEGATION_NOT_YOURS: "Use one of your own delegations (GET /delegation)",
    DELEGATION_OTHER_PLAN: "Create a delegation without planId, or one for this plan",
    REQUEST_MISMATCH: "Send the agentRequestId verify returned for this token",
}


def _status_hint(status: int) -> str:
    if status == 401:
        return "Send 'Authorization: Bearer <API key>'"
    if status == 403:
        return "This account may not do that; use the key of an account that may"
    if status == 404:
        return "Check the id in the path"
    if status >= 500:
        return "Retry later"
    return "Fix the field the message names and send the request again (GET /docs)"


def bad_request(message: str, hint: str | None = None, code: str = INVALID_FIELD) -> ApiError:
    return ApiError(400, code, message, hint)


def unauthorized() -> ApiError:
    return ApiError(
        401,
        APIKEY_INVALID,
        "Missing or invalid API key",
        "Send 'Authorization: Bearer local:<token>' with a key this sandbox issued "
        "(POST /api/v1/sandbox/accounts creates one)",
    )


def plan_not_found(plan_id: str) -> ApiError:
    return ApiError(404, PLAN_NOT_FOUND, f"Plan {plan_id!r} not found")


def agent_not_found(agent_id: str) -> ApiError:
    return ApiError(404, AGENT_NOT_FOUND, f"Agent {agent_id!r} not found")


def not_owner(what: str) -> ApiError:
    return ApiError(403, NOT_OWNER, f"Only the owner of this {what} may do that")


#: How aiohttp's own HTTP errors (router, body limit) map onto envelope codes.
HTTP_CODES: dict[int, str] = {
    404: ROUTE_NOT_FOUND,
    405: METHOD_NOT_ALLOWED,
    413: BODY_TOO_LARGE,
}


def from_http_exception(error: web.HTTPException) -> ApiError:
    """The envelope for an error aiohttp raised itself (unknown route, body too large...)."""
    status = error.status if 400 <= error.status < 600 else 400
    code = HTTP_CODES.get(status, INVALID_FIELD if status < 500 else INTERNAL)
    message = {
        404: "No such route",
        405: "Method not allowed on this route",
        413: "Request body too large (limit 1 MiB)",
    }.get(status, error.reason or "Request failed")
    return ApiError(status, code, message)
