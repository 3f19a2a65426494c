"""API keys (``<environment>:<token>`` parsed into an :class:`ApiKey`, or refused) and the
``Service-Version`` values a client may send.

A key is a bearer credential: :class:`ApiKey`'s ``repr`` hides it and no error quotes it.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .encoding import is_address, jwt_claims

if TYPE_CHECKING:  # pydantic loads with the first key parsed, not with ConfigError
    from pydantic import SecretStr


class ConfigError(ValueError):
    """The configuration or an API key is not usable; the message says which field and why."""


@dataclass(frozen=True)
class ApiKey:
    """A parsed API key. ``repr`` never shows the key itself."""

    secret: SecretStr
    environment: str | None
    address: str
    expires_at: int | None
    deployment: str | None = None
    """``staging`` for ``sandbox-staging:``/``live-staging:`` keys; ``None`` for production."""

    @property
    def expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= int(time.time())


KEY_PREFIXES: dict[str, tuple[str, str | None]] = {
    "sandbox": ("sandbox", None),
    "live": ("live", None),
    "local": ("local", None),
    "sandbox-staging": ("sandbox", "staging"),
    "live-staging": ("live", "staging"),
}
"""Key prefix → (environment, deployment). As in the SDK (``environments.py``), a prefix is
``<environment>`` or ``<environment>-<deployment>``: a staging key keeps its environment (a
``live-staging`` key moves real money, never sandbox credits); its host comes from ``baseUrl``."""


def parse_api_key(raw: str | SecretStr) -> ApiKey:
    """Parse ``<env>:<jwt>`` (WIRE.md §1.2). The error never contains the key."""
    from pydantic import SecretStr

    text = raw.get_secret_value() if isinstance(raw, SecretStr) else raw
    text = (text or "").strip()
    if ":" not in text:
        raise ConfigError(
            "Invalid API key: expected the form <environment>:<token>, "
            "for example sandbox:eyJ... (copy it again from the dashboard)"
        )
    prefix, token = text.split(":", 1)
    env = prefix.strip().lower()
    if ":" in token:
        raise ConfigError(
            "Invalid API key: it has more than one environment prefix; send it as "
            "<environment>:<token> exactly as the dashboard shows it"
        )
    claims = jwt_claims(token)
    if claims is None:
        raise ConfigError(
            "Invalid API key: the part after the environment prefix is not a valid token "
            "(copy the whole key again from the dashboard)"
        )
    address = claims.get("sub")
    if not is_address(address):
        raise ConfigError("Invalid API key: it names no account address (claim 'sub')")
    exp = claims.get("exp")
    if exp is not None and not (
        isinstance(exp, int | float) and not isinstance(exp, bool) and math.isfinite(exp)
    ):
        raise ConfigError("Invalid API key: its expiry (claim 'exp') is not a time")
    environment, deployment = KEY_PREFIXES.get(env, (None, None))
    return ApiKey(
        secret=SecretStr(text),
        environment=environment,
        address=str(address),
        expires_at=int(exp) if exp is not None else None,
        deployment=deployment,
    )


_VERSION_RE = re.compile(r"^v?(\d+)\.(\d+)(?:\.\d+)?$")


def normalize_version(value: str) -> str | None:
    """``1.0``, ``v1.0`` and ``1.0.7`` all mean ``1.0``; anything else is ``None``."""
    match = _VERSION_RE.fullmatch(value.strip())
    if match is None:
        return None
    return f"{int(match.group(1))}.{int(match.group(2))}"
