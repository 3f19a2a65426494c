"""What can go wrong talking to the service: one short tree, each class one situation.

Every error carries the HTTP status (``None`` for transport failures) and the service's error
code. Messages are built from the service's envelope and never include an API key or token.
"""

from __future__ import annotations


class ServiceError(Exception):
    """The service call failed; ``code`` is the service's error code (or ``http_<status>``)."""

    default_hint = "Try again; if it keeps failing, check the service status."

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code or (f"http_{status}" if status is not None else "network_error")
        self.hint = hint or self.default_hint
        self.retry_after: float | None = None
        """Seconds the service asked us to wait (``Retry-After``), when it said."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(status={self.status!r}, code={self.code!r})"


class AuthenticationError(ServiceError):
    """401: the API key is missing, invalid, revoked or for another environment."""

    default_hint = "Log in again with /svc_login (or /svc_login <env>:<API_KEY>)."


class PermissionDenied(ServiceError):
    """403: the key is valid but may not do this (e.g. not the plan owner, budget spent)."""

    default_hint = "Use the account that owns this resource, or create a new delegation."


class PaymentRequired(ServiceError):
    """402: the call needs credits or a payment the caller does not have."""

    default_hint = "Order the plan with svc_orderPlan, then try again."


class NotFound(ServiceError):
    """404: the plan, agent or other resource does not exist."""

    default_hint = (
        "Check the id: a buyer finds an agent's plan id in its 402 answer or card "
        "(svc_queryAgent names it); svc_listPlans lists only the plans you sell."
    )


class Conflict(ServiceError):
    """409: the request conflicts with the current state (trial already used, sold out)."""

    default_hint = "This cannot be repeated; choose another plan."


class InvalidRequest(ServiceError):
    """400/422: the service rejected the request's content."""

    default_hint = "Fix the request as the message says and try again."


class VersionRejected(InvalidRequest):
    """400 ``BCK.VERSION.0001``: the ``Service-Version`` we sent is unknown or out of range."""

    default_hint = "Set apiVersion to a supported version (GET /meta/versions lists them)."

    def __init__(self, message: str, *, version_sent: str, **kwargs: object) -> None:
        super().__init__(message, **kwargs)  # type: ignore[arg-type]
        self.version_sent = version_sent


class RateLimited(ServiceError):
    """429: too many requests; ``retry_after`` is in seconds when the service said so."""

    default_hint = "Rate limited by the service; wait and try again."

    def __init__(self, message: str, *, retry_after: float | None = None, **kwargs: object) -> None:
        super().__init__(message, **kwargs)  # type: ignore[arg-type]
        self.retry_after = retry_after
        if retry_after is not None:
            self.hint = f"Rate limited by the service; retry in {retry_after:g} s."


class ServiceUnavailable(ServiceError):
    """5xx: the service failed or is down."""

    default_hint = "The service is having trouble; retry in a minute."


class TransportError(ServiceError):
    """The request never got an HTTP answer (connection refused, DNS, TLS, reset)."""

    default_hint = "Could not reach the service; check the network and baseUrl, then retry."

    def __init__(self, message: str, *, reason: str = "", **kwargs: object) -> None:
        super().__init__(message, **kwargs)  # type: ignore[arg-type]
        #: why, in words (``connection refused: ClientConnectorError``), when known
        self.reason = reason


class RequestTimeout(TransportError):
    """The service did not answer within the configured timeout."""

    default_hint = "The service did not answer in time; retry, or raise requestTimeoutSecs."


class ProtocolError(ServiceError):
    """The service answered 2xx with a body we cannot use (not JSON, missing fields)."""

    default_hint = "The service answered unexpectedly; check baseUrl and apiVersion."


class NotLoggedIn(ServiceError):
    """No API key is configured or stored; nothing authenticated can be called."""

    default_hint = "Run /svc_login (or /svc_login <env>:<API_KEY>) first."

    def __init__(
        self, message: str = "Not logged in to the payments service", *, hint: str | None = None
    ) -> None:
        super().__init__(message, code="not_logged_in", hint=hint)
