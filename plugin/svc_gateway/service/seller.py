"""The seller's handle on the service: what selling needs, and nothing of the chat plugin.

The paid flow and its parts read a :class:`SellerSettings` (the dozen facts they use) and
call the service through a :class:`Seller`: the settings, an authenticated client and a
client for public reads. The chat plugin's account satisfies it, and so does
:class:`Payments`, built from a key (or a config) alone: what the payment middleware, and a
``build_payment_app(payments, routes)``, hold.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import SecretStr

from ..config import PluginConfig, load_config, resolve_base_url
from .errors import NotLoggedIn

if TYPE_CHECKING:
    from .client import ServiceClient
    from .transport import SessionFactory

__all__ = ["Payments", "Seller", "SellerSettings"]

#: the owed settles' file beside the credentials, when no ``settleQueuePath`` names one
QUEUE_FILE = "settle-queue.json"


@dataclass(frozen=True, slots=True)
class SellerSettings:
    """What the paid flow reads: whose plan and agent, the price, its deadlines and bounds,
    where owed settles are kept and what replicas share."""

    environment: str
    plan_id: str | None = None
    agent_id: str | None = None
    #: the price of a request when neither the way in nor a credits function names one
    credits_per_request: int = 1
    #: the service calls before the work (plan, balance, verify), and again settling
    paid_budget_secs: float = 10.0
    #: the longest the work may run (then 504, not charged)
    handler_timeout_secs: float = 30.0
    max_body_bytes: int = 64 * 1024
    #: the sold URL's origin as clients see it (behind a proxy)
    public_url: str | None = None
    #: the settle queue's file (``None``: none opens until a store is passed)
    queue_path: Path | None = None
    #: Redis shared by the replicas (``None``: this process keeps its state)
    state_url: str | None = None
    #: the seller's address (the key's): the namespace of what replicas share
    owner: str | None = None
    #: idempotency keys: how long an answer is kept, how many (in-process), how large
    idempotency_ttl_secs: float = 86400.0
    idempotency_max_entries: int = 4096
    idempotency_max_answer_bytes: int = 64 * 1024

    @classmethod
    def from_config(
        cls,
        config: PluginConfig,
        *,
        environment: str | None = None,
        plan_id: str | None = None,
        agent_id: str | None = None,
        queue_dir: Path | None = None,
        owner: str | None = None,
    ) -> SellerSettings:
        """The settings a plugin config gives; ``plan_id``/``agent_id`` win over the config's
        (precedence: argument > ``planId`` > the first of ``plans``); the queue file is
        ``settleQueuePath``, else ``settle-queue.json`` in ``queue_dir``."""
        first = config.plans[0].plan_id if config.plans else None
        if config.settle_queue_path:
            queue_path: Path | None = Path(config.settle_queue_path).expanduser()
        else:
            queue_path = None if queue_dir is None else queue_dir / QUEUE_FILE
        return cls(
            environment=environment or config.environment,
            plan_id=plan_id or config.plan_id or first,
            agent_id=agent_id or config.agent_id,
            credits_per_request=config.credits_per_request,
            paid_budget_secs=config.paid_budget_secs,
            handler_timeout_secs=config.handler_timeout_secs,
            max_body_bytes=config.max_body_bytes,
            public_url=config.paid_endpoint_public_url,
            queue_path=queue_path,
            state_url=config.state_url,
            owner=owner,
            idempotency_ttl_secs=config.idempotency_ttl_secs,
            idempotency_max_entries=config.idempotency_max_entries,
            idempotency_max_answer_bytes=config.idempotency_max_answer_bytes,
        )


class Seller(Protocol):
    """What selling holds of the service: settings, a client, a client for public reads."""

    @property
    def settings(self) -> SellerSettings:
        """Read per request (an account's plan and agent may change while it serves)."""
        ...

    def client(self) -> ServiceClient:
        """The seller's authenticated client (verify, settle); raises ``NotLoggedIn``."""
        ...

    def public_client(self) -> ServiceClient:
        """A client for public reads (plans, a payer's balance, agents)."""
        ...


class Payments:
    """A :class:`Seller` of its own: one service client (keyed, or public only) and settings.

    ``Payments.connect(key, environment="sandbox")`` for a builder's app;
    :meth:`from_config` for the plugin's config keys. :meth:`aclose` closes the client."""

    def __init__(self, client: ServiceClient, settings: SellerSettings, *, keyed: bool) -> None:
        self._client = client
        self.settings = settings
        self._keyed = keyed

    @classmethod
    def connect(
        cls,
        api_key: str | SecretStr | None,
        *,
        environment: str = "sandbox",
        base_url: str | None = None,
        session_factory: SessionFactory | None = None,
        **settings: Any,
    ) -> Payments:
        """The seller with ``api_key`` in ``environment`` (``base_url`` else
        ``SVC_<ENV>_BASE_URL``); ``settings`` are the plugin's config keys (``planId``,
        ``paidBudgetSecs``, ...)."""
        raw: dict[str, Any] = {"environment": environment, **settings}
        if api_key is not None:
            raw["svcApiKey"] = api_key
        if base_url is not None:
            raw["baseUrl"] = base_url
        return cls.from_config(load_config(raw), session_factory=session_factory)

    @classmethod
    def from_config(
        cls,
        config: PluginConfig,
        *,
        queue_dir: Path | None = None,
        session_factory: SessionFactory | None = None,
    ) -> Payments:
        """The seller ``config`` names (its ``svcApiKey``; no credential store is read).
        Raises ``ConfigError`` when the environment has no URL."""
        from .client import ServiceClient

        key = config.api_key
        client = ServiceClient(
            resolve_base_url(config, config.environment),
            key.secret if key is not None else None,
            environment=config.environment,
            api_version=config.api_version,
            timeout=config.request_timeout_secs,
            session_factory=session_factory,
        )
        owner = key.address if key is not None else None
        settings = SellerSettings.from_config(config, queue_dir=queue_dir, owner=owner)
        return cls(client, settings, keyed=key is not None)

    def client(self) -> ServiceClient:
        if not self._keyed:
            raise NotLoggedIn()
        return self._client

    def public_client(self) -> ServiceClient:
        return self._client

    async def aclose(self) -> None:
        await self._client.aclose()
