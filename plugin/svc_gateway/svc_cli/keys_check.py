"""Whether the service takes a key (``svc login``), and profiles for a local sandbox's accounts
(``svc config init --from-sandbox``): the two profile steps that ask the service."""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import BadUsage, Refused
from .profiles import check_base_url

if TYPE_CHECKING:
    from ..api_keys import ApiKey

#: the profiles ``config init --from-sandbox`` makes, one account each
SANDBOX_PROFILES = ("builder", "subscriber")
CHECK_SECS = 20.0
_API_ROOT = re.compile(r"/api/v\d+$")


@dataclass(frozen=True)
class KeyCheck:
    """``ok``: the service took the key; else ``why`` it could not be checked (never a
    refusal: a refused key raises)."""

    ok: bool
    why: str = ""


def check_key(key: ApiKey, environment: str, base_url: str | None) -> KeyCheck:
    """One authenticated read with ``key`` (a page of one plan). A key the service refuses is
    :class:`Refused` (exit 1); a service that cannot be reached is a :class:`KeyCheck` saying
    so, for the caller to tell plainly."""
    from ..service.errors import AuthenticationError, PermissionDenied, ServiceError
    from .client import CliClient

    if base_url is None:
        return KeyCheck(False, f"no service URL is known for environment '{environment}'")

    async def read() -> None:
        client = CliClient(base_url, key.secret, environment=environment, timeout=CHECK_SECS)
        try:
            await client.list_plans(page=1, page_size=1)
        finally:
            await client.aclose()

    try:
        asyncio.run(read())
    except AuthenticationError:
        raise Refused(
            "the service refused this API key (its signature is invalid, or it was revoked or "
            "is for another environment); nothing was stored. Copy the key again",
            code="key_refused",
        ) from None
    except PermissionDenied:
        return KeyCheck(True)  # the key is genuine; it may just not list plans
    except ServiceError as error:
        if error.status is None:  # nothing answered: say why, not a code
            why = getattr(error, "reason", "") or error.code
            return KeyCheck(False, f"the service at {base_url} could not be reached ({why})")
        return KeyCheck(False, f"the service at {base_url} answered {error.code}")
    return KeyCheck(True)


def sandbox_root(value: str) -> str:
    """The sandbox's REST root from its origin or its ``/api/v1`` URL."""
    url = check_base_url(value, "--from-sandbox")
    return url if _API_ROOT.search(url) else url + "/api/v1"


def sandbox_accounts(base_url: str) -> dict[str, dict[str, str]]:
    """A new account (``apiKey``, ``address``) for each of :data:`SANDBOX_PROFILES`."""
    from ..service.errors import NotFound, ServiceError
    from .client import CliClient

    async def create() -> dict[str, dict[str, str]]:
        client = CliClient(base_url, None, environment="local", timeout=CHECK_SECS)
        try:
            made = {}
            for name in SANDBOX_PROFILES:
                answer = await client.create_sandbox_account(name)
                made[name] = {k: str(answer.get(k, "")) for k in ("apiKey", "address")}
            return made
        finally:
            await client.aclose()

    try:
        return asyncio.run(create())
    except NotFound:
        raise BadUsage(
            f"--from-sandbox: {base_url} is not a local sandbox (it has no /sandbox/accounts); "
            "start one with 'svc-gateway sandbox --port 8765' and pass http://127.0.0.1:8765"
        ) from None
    except ServiceError as error:
        raise Refused(
            f"Could not create the sandbox's accounts at {base_url}: {error.message}. Is "
            "'svc-gateway sandbox' running there?",
            code=error.code,
        ) from None
