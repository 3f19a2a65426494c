"""What the plugin depends on, checked once at start and told in one line: the service (it
answers ``GET meta/versions``, a public read) and, with ``stateUrl``, Redis (it answers PING).

A failure names what could not be reached and what to do, so an unreachable service or Redis
is said at start instead of surfacing later as a tool's ``network_error`` or the paid flow's
``state_unavailable``. Nothing here raises: the line is the answer.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from ..redact import describe_state_url, get_logger
from .client import ServiceClient
from .errors import AuthenticationError, NotLoggedIn, ServiceError
from .transport import origin, unreachable

log = get_logger("svc_gateway.start")

CHECK_SECS = 3.0


@dataclass(frozen=True, slots=True)
class StartCheck:
    """The one line, and whether everything answered."""

    line: str
    ok: bool


async def _service(client: ServiceClient, secs: float) -> tuple[bool, str]:
    where = origin(client.base_url)
    try:
        async with asyncio.timeout(secs):
            try:
                versions = await client.get_versions()
            except NotLoggedIn:  # no key: an answer without one still proves it is there
                versions = await client.get_versions(auth=False)
    except AuthenticationError:
        return True, f"the service at {where} answers"
    except TimeoutError:
        return False, (
            f"the service at {where} did not answer within {secs:g} s; check baseUrl (or "
            "environment), or start a local sandbox with 'svc-gateway sandbox'"
        )
    except ServiceError as exc:
        if exc.status is None:
            why = getattr(exc, "reason", "") or exc.code
            return False, (
                f"the service at {where} cannot be reached ({why}); check baseUrl (or "
                "environment), or start a local sandbox with 'svc-gateway sandbox'"
            )
        return False, (
            f"the service at {client.base_url} answered HTTP {exc.status} ({exc.code}); check "
            "that baseUrl is the service's API root (it ends in /api/v1)"
        )
    return True, f"the service at {where} answers (API {versions.current})"


async def _redis(url: str, secs: float) -> tuple[bool, str]:
    where = describe_state_url(url)
    try:
        import redis.asyncio as aioredis
    except ImportError:
        return False, (
            f"stateUrl names Redis at {where}, and the redis extra is not installed "
            "(pip install -e '.[redis]')"
        )
    client = aioredis.from_url(url, socket_connect_timeout=secs, socket_timeout=secs)
    try:
        async with asyncio.timeout(secs):
            await client.ping()
    except Exception as exc:
        return False, (
            f"Redis at {where} (stateUrl) cannot be reached ({unreachable(exc)}); what shares "
            "it (the paid flow's book and settles, the spending mandates) waits until it "
            "answers: start Redis or fix stateUrl"
        )
    finally:
        await client.aclose()
    return True, f"Redis at {where} answers"


async def start_check(
    client: ServiceClient | None, state_url: str | None = None, *, secs: float = CHECK_SECS
) -> StartCheck:
    """Check the service (``client``'s; ``None``: not checked) and Redis (``state_url``) at
    once; one line of what answered."""
    checks = [_service(client, secs)] if client is not None else []
    if state_url:
        checks.append(_redis(state_url, secs))
    results = await asyncio.gather(*checks)
    ok = all(good for good, _ in results)
    told = "; ".join(text for _, text in results)
    return StartCheck(f"Start-up check: {told}." if ok else f"Start-up check failed: {told}.", ok)


async def log_start_check(client: ServiceClient | None, state_url: str | None = None) -> StartCheck:
    """:func:`start_check`, logged (INFO when all answered, else WARNING)."""
    check = await start_check(client, state_url)
    log.log(logging.INFO if check.ok else logging.WARNING, "%s", check.line)
    return check
