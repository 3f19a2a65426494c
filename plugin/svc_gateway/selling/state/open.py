"""Choosing where a paid flow keeps its state: in this process, or shared through ``stateUrl``.

Nothing here imports ``redis`` at load: the package is an optional extra (from a checkout:
``pip install -e '.[redis]'``) loaded only when ``stateUrl`` is set.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ...config import ConfigError, PluginConfig
from ...redact import get_logger
from .book import BalanceRead
from .settle_journal import default_queue_path

if TYPE_CHECKING:
    from ...service.seller import Seller, SellerSettings
    from .redis_store import RedisState

log = get_logger("svc_gateway.paid")


def open_state(
    config: PluginConfig | SellerSettings,
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
            "stateUrl needs the redis package: from a checkout, pip install -e '.[redis]'"
        ) from None
    return RedisState.connect(url, config, read_balance, spool, owner=owner)


def shared_state(seller: Seller) -> RedisState | None:
    """With ``stateUrl``: the admission book, settle queue and stats every replica shares
    (the paid endpoint's and the payment middleware's flow alike); ``None`` without. Its local
    spool is the flow's settle file (``settleQueuePath``)."""
    settings = seller.settings
    if not settings.state_url:
        return None

    async def read_balance(plan_id: str, payer: str) -> int:
        return (await seller.public_client().get_plan_balance(plan_id, payer)).balance

    def owner() -> str | None:  # the plans' owner: the account whose key settles
        return seller.settings.owner

    state = open_state(settings, read_balance, spool=default_queue_path(settings), owner=owner)
    log.info("paid flow shares its admission book and settle queue at %s", state.where)
    return state
