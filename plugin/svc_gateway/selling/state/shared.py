"""Choosing where a paid flow keeps its state: in this process, or shared through ``stateUrl``.

Nothing here imports ``redis``: the package is an optional extra (``pip install
'svc-gateway-plugin[redis]'``) loaded only when ``stateUrl`` is set.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from ...config import ConfigError, PluginConfig
from ...redact import get_logger
from ...service.errors import ServiceUnavailable
from .book import BalanceRead

if TYPE_CHECKING:
    from ...chat.core import PluginCore
    from .redis_store import RedisState

log = get_logger("svc_gateway.paid")


class StateUnavailable(ServiceUnavailable):
    """The shared state store (Redis) did not answer: admission fails closed (503)."""

    default_hint = "The agent's shared state store is unreachable; retry in a few seconds."

    def __init__(self, where: str, exc: BaseException) -> None:
        super().__init__(
            f"the shared state store at {where} did not answer ({type(exc).__name__})",
            code="state_unavailable",
        )


def describe_state_url(url: str) -> str:
    """``host:port/db`` of a ``stateUrl``, without its user name or password."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return f"unix:{parts.path}"
    host = parts.hostname or "localhost"
    if ":" in host:
        host = f"[{host}]"
    db = parts.path.lstrip("/") or "0"
    return f"{host}:{parts.port or 6379}/{db}"


def claim_ttl_secs(config: PluginConfig) -> float:
    """How long a request may hold its claim: admission and settle budgets, the handler's
    deadline, and a margin; a replica that dies frees its payers' credits after it."""
    return 2 * config.paid_budget_secs + config.handler_timeout_secs + 5.0


def open_state(
    config: PluginConfig,
    read_balance: BalanceRead,
    spool: Path,
    owner: Callable[[], str | None] = lambda: None,
) -> RedisState:
    """The Redis-backed book, settle store and stats for ``config.state_url``; ``spool`` is
    this replica's local file for settles queued while Redis is unreachable; ``owner`` names
    the seller's account, whose namespace every key is in."""
    url = config.state_url
    if not url:
        raise ConfigError("open_state needs stateUrl")
    try:
        from .redis_store import RedisState
    except ImportError:
        raise ConfigError(
            "stateUrl needs the redis package: pip install 'svc-gateway-plugin[redis]'"
        ) from None
    return RedisState.connect(url, config, read_balance, spool, owner=owner)


def shared_state(core: PluginCore) -> RedisState | None:
    """With ``stateUrl``: the admission book, settle queue and stats every replica shares
    (the paid endpoint's and the payment middleware's flow alike); ``None`` without. Its local
    spool is the flow's settle file (``settleQueuePath``)."""
    if not core.config.state_url:
        return None
    from ..flow.settling import default_queue_path

    async def read_balance(plan_id: str, payer: str) -> int:
        return (await core.public_client().get_plan_balance(plan_id, payer)).balance

    def owner() -> str | None:  # the plans' owner: the account whose key settles
        return core.session.address if core.session is not None else None

    state = open_state(core.config, read_balance, spool=default_queue_path(core), owner=owner)
    log.info("paid flow shares its admission book and settle queue at %s", state.where)
    return state
