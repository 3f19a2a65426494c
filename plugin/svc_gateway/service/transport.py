"""HTTP plumbing of the service client: one pooled aiohttp session, deadlines, retries, errors.

Every request carries ``Service-Version``; authenticated ones carry the Bearer key. Each call has
one overall deadline (``timeout`` seconds, or less inside :meth:`ApiTransport.deadline`) that
covers connecting, sending, reading a slow body, every retry and every backoff sleep. Calls that
are safe to repeat (reads, verify, settle with an ``agentRequestId``) retry with capped, jittered
exponential backoff on 429/502/503/504 and connection errors, honouring ``Retry-After``. Orders,
registrations and token creation are never retried: a retry could buy twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import email.utils
import json
import logging
import math
import os
import random
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, TypeVar
from urllib.parse import quote, urlencode, urlsplit

import aiohttp
from aiohttp import hdrs
from multidict import CIMultiDictProxy
from pydantic import SecretStr, ValidationError

from ..api_keys import ApiKey, parse_api_key
from ..config import DEFAULT_API_VERSION
from ..redact import get_logger
from . import errors
from .models import WireModel

log = get_logger("svc_gateway.client")
M = TypeVar("M", bound=WireModel)

SessionFactory = Callable[[], aiohttp.ClientSession]
"""Builds the client's one pooled session; called lazily, on the loop that makes the calls."""

JSON = "application/json"
RETRY_STATUSES = frozenset({429, 502, 503, 504})
RETRY_AFTER_FLOOR = 0.05
"""A ``Retry-After`` of zero, negative or in the past still waits this long (no hot loop)."""

_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "svc_gateway_deadline", default=None
)


#: exchange timeouts kept built (one per total seen; the hot path's calls use one or two)
TIMEOUTS_KEPT = 16

POOL_SIZE = 64
"""Connections kept to the service: the paid endpoint's verify/settle run this many at once."""


def default_session_factory() -> aiohttp.ClientSession:
    """A keep-alive pool for the service host. No cookie jar: nothing one account's answer
    sets may ride along on another account's request."""
    connector = aiohttp.TCPConnector(limit=POOL_SIZE, limit_per_host=POOL_SIZE)
    return aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar())


def origin(url: str) -> str:
    """``scheme://host:port`` of a URL: where a connection goes, without the API's path."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}" if parts.netloc else url


def unreachable(exc: BaseException) -> str:
    """Why a connection failed, in words (``connection refused``), then the exception's kind:
    the first OS error number along the exception's causes."""
    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            break
        cause = getattr(seen, "os_error", None) or seen
        number = getattr(cause, "errno", None)
        if isinstance(number, int):
            return f"{os.strerror(number).lower()}: {type(exc).__name__}"
        seen = seen.__cause__ or seen.__context__
    return type(exc).__name__


class ApiTransport:
    """One pooled ``aiohttp.ClientSession`` plus the key, version, deadline and retry policy."""

    def __init__(
        self,
        base_url: str,
        api_key: str | SecretStr | None = None,
        *,
        environment: str | None = None,
        api_version: str = DEFAULT_API_VERSION,
        timeout: float = 30.0,
        session_factory: SessionFactory | None = None,
        max_retries: int = 3,
        backoff_base: float = 0.25,
        backoff_cap: float = 8.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._key: ApiKey | None = parse_api_key(api_key) if api_key else None
        self.environment = environment or (self._key.environment if self._key else None)
        self.base_url = base_url.rstrip("/")
        self.api_version = api_version
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self._sleep = sleep
        self._clock = clock
        self._session_factory = session_factory or default_session_factory
        self._session: aiohttp.ClientSession | None = None
        self._headers = {
            hdrs.ACCEPT: JSON,
            hdrs.CONTENT_TYPE: JSON,
            "Service-Version": api_version,
        }
        self._authed_headers: dict[str, str] | None = None
        #: each exchange's ``ClientTimeout`` by its total (:meth:`_send`)
        self._timeouts: dict[float, aiohttp.ClientTimeout] = {}
        #: a key that expires is checked on every call; one that does not, once
        self._key_expires = self._key is not None and self._key.expires_at is not None

    def __repr__(self) -> str:
        who = self._key.address if self._key else "anonymous"
        return f"{type(self).__name__}(base_url={self.base_url!r}, account={who!r})"

    @property
    def address(self) -> str | None:
        return self._key.address if self._key else None

    @property
    def authenticated(self) -> bool:
        return self._key is not None

    @property
    def session(self) -> aiohttp.ClientSession:
        """The pooled session, created on first use on the running (plugin) loop."""
        if self._session is None or self._session.closed:
            self._session = self._session_factory()
        return self._session

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None and not session.closed:
            await session.close()

    @contextlib.contextmanager
    def deadline(self, seconds: float) -> Iterator[None]:
        """Every call made inside (in this task) ends within ``seconds`` from now, retries
        included: the paid endpoint's total budget for verify + settle."""
        at = self._clock() + seconds
        outer = _DEADLINE.get()
        token = _DEADLINE.set(at if outer is None else min(outer, at))
        try:
            yield
        finally:
            _DEADLINE.reset(token)

    # -- transport ---------------------------------------------------------------------------

    def _request_headers(self, auth: bool) -> dict[str, str]:
        if not auth:
            return self._headers
        if self._key is None:
            raise errors.NotLoggedIn()
        if self._key.expired:
            raise errors.AuthenticationError("The API key has expired", code="key_expired")
        if self._authed_headers is None:
            bearer = f"Bearer {self._key.secret.get_secret_value()}"
            self._authed_headers = {**self._headers, hdrs.AUTHORIZATION: bearer}
        return self._authed_headers

    def _url(self, path: str, params: Mapping[str, Any] | None) -> str:
        """``path`` is relative (no leading ``/``); ids in it were quoted by :func:`seg`."""
        url = f"{self.base_url}/{path}"
        return f"{url}?{urlencode(params)}" if params else url

    async def _request(
        self,
        method: str,
        path: str,
        *,
        auth: bool = True,
        body: dict[str, Any] | None = None,
        params: dict[str, Any] | None = None,
        retry: bool = False,
        headers: dict[str, str] | None = None,
        data: bytes | None = None,
        within: float | None = None,
        model: type[WireModel] | None = None,
    ) -> Any:
        """``body`` is sent as compact JSON; ``data``, a body already encoded, as is.
        ``within``: this call (retries included) ends within that many seconds from now, like
        :meth:`deadline` for one call. ``model``: a 2xx answer is returned as that model
        (:func:`parse_answer`), else as the decoded JSON."""
        own = self._authed_headers
        if own is None or not auth or self._key_expires:
            own = self._request_headers(auth)
        headers = {**own, **headers} if headers else own
        url = f"{self.base_url}/{path}" if not params else self._url(path, params)
        if body is not None:
            data = json.dumps(body, separators=(",", ":")).encode()
        attempts = self.max_retries + 1 if retry else 1
        now = self._clock()
        span = self.timeout if within is None else min(self.timeout, within)
        end = now + span
        outer = _DEADLINE.get()
        if outer is not None and outer < end:
            end, span = outer, outer - now
        attempt = 0
        while True:
            attempt += 1
            # the first attempt has the whole span (the same figure each time for a call
            # without a nearer deadline, so its exchange timeout is built once: _send)
            left = span if attempt == 1 else end - self._clock()
            if left <= 0:
                raise errors.RequestTimeout(
                    f"{method} {path} ran out of time before it could be sent", code="timeout"
                )
            try:
                status, reason, answer_headers, raw = await self._send(
                    method, url, headers, data, left
                )
            except TimeoutError:
                failure: errors.ServiceError = errors.RequestTimeout(
                    f"{method} {path} got no complete answer within {left:.3g} s", code="timeout"
                )
            except aiohttp.ClientError as exc:  # code: network_error, status: None
                where = origin(self.base_url)
                failure = errors.TransportError(
                    f"Could not reach the service at {where} ({unreachable(exc)}) for "
                    f"{method} {path.split('?')[0]}",
                    reason=unreachable(exc),
                    hint=f"Check that the service at {where} is running and that baseUrl (or "
                    "environment) names it; a local sandbox is started with 'svc-gateway "
                    "sandbox'. Then retry.",
                )
            else:
                if log.isEnabledFor(logging.DEBUG):
                    log.debug(
                        "%s %s -> %s (Service-Version %s from %s)",
                        method,
                        path,
                        status,
                        answer_headers.get("Service-Version"),
                        answer_headers.get("Service-Version-Resolved-From"),
                    )
                if 200 <= status < 300:
                    if model is not None:
                        return parse_answer(model, status, raw, method, path)
                    return _json_or_raise(status, raw, method, path)
                failure = self._error(status, reason, answer_headers, raw)
                if status not in RETRY_STATUSES:
                    raise failure
            if attempt >= attempts:
                raise failure
            delay = self._delay(attempt, failure)
            if delay is None or self._clock() + delay >= end:
                raise failure  # the service's wait, or ours, would overrun this call's deadline
            log.info("retrying %s %s in %.2fs (%s)", method, path, delay, failure.code)
            await self._sleep(delay)

    async def _send(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        data: bytes | None,
        left: float,
    ) -> tuple[int, str, CIMultiDictProxy[str], bytes]:
        """One attempt; ``total`` bounds the whole exchange, reading a slow-drip body too."""
        timeout = self._timeouts.get(left)
        if timeout is None:  # kept per figure (immutable): a few recur on every call
            if len(self._timeouts) >= TIMEOUTS_KEPT:
                self._timeouts.clear()
            timeout = self._timeouts[left] = aiohttp.ClientTimeout(total=left)
        session = self._session
        if session is None or session.closed:
            session = self.session
        async with session.request(
            method, url, headers=headers, data=data, timeout=timeout, allow_redirects=False
        ) as response:
            raw = await response.read()
            return response.status, response.reason or "", response.headers, raw

    def _delay(self, attempt: int, failure: errors.ServiceError) -> float | None:
        """How long to wait before the next attempt: the service's ``Retry-After`` when it
        gave one (floored, capped), else capped exponential backoff with jitter."""
        if failure.retry_after is not None:
            if failure.retry_after > self.backoff_cap:
                return None  # "come back in an hour": the caller decides, with retry_after
            return max(failure.retry_after, RETRY_AFTER_FLOOR)
        ceiling = min(self.backoff_cap, self.backoff_base * (2 ** (attempt - 1)))
        return random.uniform(ceiling / 2, ceiling)

    def _error(
        self, status: int, reason: str, headers: Mapping[str, str], raw: bytes
    ) -> errors.ServiceError:
        code, message, hint = _envelope(status, reason, raw)
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
        retry_after = parse_retry_after(headers.get(hdrs.RETRY_AFTER), now=time.time())
        if status == 429:
            return errors.RateLimited(message, retry_after=retry_after, **kwargs)
        if status >= 500:
            failure = errors.ServiceUnavailable(message, **kwargs)
            failure.retry_after = retry_after
            return failure
        return errors.InvalidRequest(message, **kwargs)


def seg(value: str) -> str:
    """One URL path segment: ids never smuggle a ``/`` or ``..`` into the path."""
    return quote(str(value), safe=":")


def _envelope(status: int, reason: str, raw: bytes) -> tuple[str | None, str, str | None]:
    """The service's error envelope ``{code|errorCode, message|error, hint?, details?}``."""
    try:
        body = json.loads(raw)
    except ValueError:  # empty, not JSON, or not UTF-8
        body = None
    if isinstance(body, dict):
        code = body.get("code") or body.get("errorCode")
        message = str(body.get("message") or body.get("error") or reason or f"HTTP {status}")
        hint = body.get("hint")
        details = body.get("details")
        if details and isinstance(details, str | int | float):
            message = f"{message} ({details})"
        return (str(code) if code else None), message, (str(hint) if hint else None)
    text = raw[:200].decode(errors="replace").strip() or reason
    return None, (f"HTTP {status}: {text}" if text else f"HTTP {status}"), None


RETRY_AFTER_MAX = 24 * 3600.0
"""A ``Retry-After`` beyond a day is read as a day (the deadline decides long before)."""


def parse_retry_after(value: str | None, *, now: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delta-seconds or an HTTP-date.

    Never raises. Garbage (``soon``) → ``None`` (use our own backoff); negative or past → 0;
    huge or infinite → :data:`RETRY_AFTER_MAX`. ``now`` is wall-clock time (``time.time()``).
    """
    if not value or not value.strip():
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            parsed = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
        if parsed is None:  # pragma: no cover - older Pythons returned None
            return None
        try:
            seconds = parsed.timestamp() - now
        except (OverflowError, OSError, ValueError):
            return None
    if math.isnan(seconds):
        return None
    return min(max(0.0, seconds), RETRY_AFTER_MAX)


def _json_or_raise(status: int, raw: bytes, method: str, path: str) -> Any:
    if not raw:
        return {}
    try:
        if raw[:1] == b"{" and raw[1:2] != b"\x00":  # UTF-8 (json.loads's detect_encoding)
            return _DECODE(raw.decode("utf-8", "surrogatepass"))
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise errors.ProtocolError(
            f"{method} {path} answered {status} with a non-JSON body",
            status=status,
            code="bad_response",
        ) from None


#: ``json.loads`` of a ``str`` (its default decoder)
_DECODE = json.JSONDecoder().decode


def parse_model(model: type[M], data: Any) -> M:
    """``model.model_validate(data)`` (its validator called directly), or the
    :class:`~.errors.ProtocolError` of a malformed answer."""
    try:
        return model.__pydantic_validator__.validate_python(data)  # type: ignore[no-any-return]
    except ValidationError as exc:
        raise _mismatch(model, exc) from None


def parse_answer(model: type[M], status: int, raw: bytes, method: str, path: str) -> M:
    """A 2xx answer's bytes as ``model``: a JSON object is validated from the bytes in one
    pass (pydantic's JSON mode: no dict is built and walked again); anything its parser does
    not take (not an object, not UTF-8, ``NaN``, empty) goes the general way,
    :func:`parse_model` of the decoded JSON, so every answer reads, or is refused, as it was."""
    if raw[:1] == b"{":
        try:
            return model.__pydantic_validator__.validate_json(raw)  # type: ignore[no-any-return]
        except ValidationError as exc:
            if exc.error_count() != 1 or exc.errors()[0]["type"] != "json_invalid":
                raise _mismatch(model, exc) from None
    return parse_model(model, _json_or_raise(status, raw, method, path))


def _mismatch(model: type[WireModel], exc: ValidationError) -> errors.ProtocolError:
    fields = ", ".join(".".join(str(p) for p in e["loc"]) for e in exc.errors()[:3])
    return errors.ProtocolError(
        f"The service's answer did not match {model.__name__} ({fields})", code="bad_response"
    )


def data_of(body: Any) -> dict[str, Any]:
    if isinstance(body, dict) and isinstance(body.get("data"), dict):
        return dict(body["data"])
    return body if isinstance(body, dict) else {}


def require_str(body: Any, key: str) -> str:
    value = body.get(key) if isinstance(body, dict) else None
    if not isinstance(value, str) or not value:
        raise errors.ProtocolError(f"The service's answer has no {key}", code="bad_response")
    return value
