"""HTTP plumbing of the service client: headers, retries, and errors from answers.

Every request carries ``Service-Version``; authenticated ones carry the Bearer key. Calls that
are safe to repeat (reads, verify, settle with an ``agentRequestId``) retry with capped,
jittered exponential backoff on 429/502/503/504 and connection errors, honouring Retry-After.
Orders, registrations and token creation are never retried: a retry could buy twice.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
from pydantic import SecretStr, ValidationError

from . import errors
from .config import DEFAULT_API_VERSION, ApiKey, parse_api_key
from .models import WireModel
from .redact import get_logger

log = get_logger("svc_gateway.client")
M = TypeVar("M", bound=WireModel)

RETRY_STATUSES = frozenset({429, 502, 503, 504})


class ApiTransport:
    """One pooled ``httpx.AsyncClient`` plus the key, version and retry policy."""

    def __init__(
        self,
        base_url: str,
        api_key: str | SecretStr | None = None,
        *,
        environment: str | None = None,
        api_version: str = DEFAULT_API_VERSION,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
        max_retries: int = 3,
        backoff_base: float = 0.25,
        backoff_cap: float = 8.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._key: ApiKey | None = parse_api_key(api_key) if api_key else None
        self.environment = environment or (self._key.environment if self._key else None)
        self.base_url = base_url.rstrip("/")
        self.api_version = api_version
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self._sleep = sleep
        self._http = httpx.AsyncClient(
            base_url=self.base_url + "/",
            timeout=httpx.Timeout(timeout, connect=min(10.0, timeout)),
            transport=transport,
            headers={
                "Accept": "application/json",
                "Content-Type": "application/json",
                "Service-Version": api_version,
            },
            limits=httpx.Limits(max_connections=50, max_keepalive_connections=50),
            follow_redirects=False,
        )

    def __repr__(self) -> str:
        who = self._key.address if self._key else "anonymous"
        return f"{type(self).__name__}(base_url={self.base_url!r}, account={who!r})"

    @property
    def address(self) -> str | None:
        return self._key.address if self._key else None

    @property
    def authenticated(self) -> bool:
        return self._key is not None

    async def aclose(self) -> None:
        await self._http.aclose()

    # -- transport ---------------------------------------------------------------------------

    def _auth_headers(self) -> dict[str, str]:
        if self._key is None:
            raise errors.NotLoggedIn()
        if self._key.expired:
            raise errors.AuthenticationError(
                "The API key has expired", code="key_expired", status=None
            )
        return {"Authorization": f"Bearer {self._key.secret.get_secret_value()}"}

    async def _request(
        self,
        method: str,
        path: str,
        *,
        auth: bool = True,
        body: dict[str, Any] | None = None,
        params: dict[str, Any] | None = None,
        retry: bool = False,
    ) -> Any:
        headers = self._auth_headers() if auth else {}
        attempts = self.max_retries + 1 if retry else 1
        for attempt in range(1, attempts + 1):
            try:
                response = await self._http.request(
                    method, path.lstrip("/"), json=body, params=params, headers=headers
                )
            except httpx.TimeoutException:
                failure: errors.ServiceError = errors.RequestTimeout(
                    f"{method} {path} timed out", code="timeout"
                )
            except httpx.TransportError as exc:
                failure = errors.TransportError(
                    f"{method} {path} failed: {type(exc).__name__}", code="network_error"
                )
            else:
                log.debug(
                    "%s %s -> %s (Service-Version %s from %s)",
                    method,
                    path,
                    response.status_code,
                    response.headers.get("Service-Version"),
                    response.headers.get("Service-Version-Resolved-From"),
                )
                if response.is_success:
                    return _json_or_raise(response, method, path)
                failure = self._error(response)
                if response.status_code not in RETRY_STATUSES:
                    raise failure
            if attempt >= attempts:
                raise failure
            delay = self._delay(attempt, failure)
            if delay is None:
                raise failure
            log.info("retrying %s %s in %.2fs (%s)", method, path, delay, failure.code)
            await self._sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    def _delay(self, attempt: int, failure: errors.ServiceError) -> float | None:
        if isinstance(failure, errors.RateLimited) and failure.retry_after is not None:
            # the service told us when; waiting longer than the cap is the caller's decision
            return None if failure.retry_after > self.backoff_cap * 4 else failure.retry_after
        ceiling = min(self.backoff_cap, self.backoff_base * (2 ** (attempt - 1)))
        return random.uniform(ceiling / 2, ceiling)

    def _error(self, response: httpx.Response) -> errors.ServiceError:
        status = response.status_code
        code, message, hint = _envelope(response)
        kwargs: dict[str, Any] = {"status": status, "code": code, "hint": hint}
        if code == "BCK.VERSION.0001":
            return errors.VersionRejected(
                f"The service rejected Service-Version {self.api_version}: {message}",
                version_sent=self.api_version,
                **kwargs,
            )
        if status == 401:
            return errors.AuthenticationError(message, **kwargs)
        if status == 402:
            return errors.PaymentRequired(message, **kwargs)
        if status == 403:
            return errors.PermissionDenied(message, **kwargs)
        if status == 404:
            return errors.NotFound(message, **kwargs)
        if status == 409:
            return errors.Conflict(message, **kwargs)
        if status == 429:
            return errors.RateLimited(
                message, retry_after=_retry_after(response.headers.get("Retry-After")), **kwargs
            )
        if status >= 500:
            return errors.ServiceUnavailable(message, **kwargs)
        return errors.InvalidRequest(message, **kwargs)


def seg(value: str) -> str:
    """One URL path segment: ids never smuggle a ``/`` or ``..`` into the path."""
    return quote(str(value), safe=":")


def _envelope(response: httpx.Response) -> tuple[str | None, str, str | None]:
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        code = body.get("code") or body.get("errorCode")
        message = str(body.get("message") or body.get("error") or response.reason_phrase)
        hint = body.get("hint")
        details = body.get("details")
        if details and isinstance(details, str | int | float):
            message = f"{message} ({details})"
        return (str(code) if code else None), message, (str(hint) if hint else None)
    text = response.text[:200].strip() or response.reason_phrase
    return None, f"HTTP {response.status_code}: {text}", None


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value) if value else None
        if parsed is None:
            return None
        return max(0.0, parsed.timestamp() - time.time())


def _json_or_raise(response: httpx.Response, method: str, path: str) -> Any:
    if not response.content:
        return {}
    try:
        return response.json()
    except ValueError:
        raise errors.ProtocolError(
            f"{method} {path} answered {response.status_code} with a non-JSON body",
            status=response.status_code,
            code="bad_response",
        ) from None


def parse_model(model: type[M], data: Any) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        fields = ", ".join(".".join(str(p) for p in e["loc"]) for e in exc.errors()[:3])
        raise errors.ProtocolError(
            f"The service's answer did not match {model.__name__} ({fields})",
            code="bad_response",
        ) from None


def data_of(body: Any) -> dict[str, Any]:
    if isinstance(body, dict) and isinstance(body.get("data"), dict):
        return dict(body["data"])
    return body if isinstance(body, dict) else {}


def require_str(body: Any, key: str) -> str:
    value = body.get(key) if isinstance(body, dict) else None
    if not isinstance(value, str) or not value:
        raise errors.ProtocolError(f"The service's answer has no {key}", code="bad_response")
    return value
