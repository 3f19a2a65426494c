"""The plugin's state: config, who is logged in, the service client, defaults, caches.

Host-agnostic: tools, commands, the context hook and the paid endpoint all reach the service
through one :class:`PluginCore`, which lives on the plugin loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from pydantic import SecretStr

from ..api_keys import ApiKey, parse_api_key
from ..config import ENVIRONMENTS, ConfigError, PluginConfig, resolve_base_url
from ..redact import get_logger
from ..runtime import PluginRuntime
from ..service.errors import AuthenticationError, NotLoggedIn, PermissionDenied, ServiceError
from .credentials import CredentialStore

if TYPE_CHECKING:  # the client and its pydantic models load with the first client
    from ..approvals.gate import Approvals
    from ..service.client import ServiceClient
    from ..service.models import PlanBalance
    from ..service.seller import SellerSettings
    from ..service.transport import SessionFactory

log = get_logger("svc_gateway.core")

KeySource = Literal["config", "keyring", "file", "stored"]

#: What a chat user with no account is told (hosted gateway, ``perUserAccounts``).
USER_LOGIN_HINT = (
    "Ask the user whether the gateway's operator may open a payments account for them; if they "
    "agree, they send /svc_login new. Or they link their own key: /svc_login <env>:<API_KEY>."
)


class KeyUnchecked(ConfigError):
    """The service could not be asked whether it takes a key (unreachable, or it failed)."""


@dataclass(frozen=True)
class Session:
    """The account the plugin acts for. Its repr shows the address, never the key."""

    key: ApiKey
    environment: str
    source: KeySource

    @property
    def address(self) -> str:
        return self.key.address


def refuse_other_environment(key: ApiKey, environment: str) -> None:
    """A key whose prefix names another environment is never used, checked or stored."""
    if key.environment not in (None, environment):
        raise ConfigError(
            f"this is a key for the {key.environment} environment, but this gateway is "
            f"configured for {environment}; use a {environment} key (or set environment: "
            f"{key.environment} in the plugin config and restart)"
        )


class PluginCore:
    """Everything the tools and hooks share; one instance per registered plugin."""

    def __init__(
        self,
        config: PluginConfig,
        runtime: PluginRuntime,
        *,
        store: CredentialStore | None = None,
        session_factory: SessionFactory | None = None,
        clock: Callable[[], float] | None = None,
        identity: str | None = None,
    ) -> None:
        self.config = config
        #: The chat user this core acts for (``channel:sender``), ``None`` for the gateway's own
        #: account (the operator, or the one user of a single-user gateway).
        self.identity = identity
        self.runtime = runtime
        self.store = store if store is not None else CredentialStore()
        self.session_factory = session_factory
        self.clock = clock
        self.plan_id: str | None = config.plan_id
        self.agent_id: str | None = config.agent_id
        self.session: Session | None = None
        #: Environments with a stored key other than the configured one (never used; status
        #: names them so the user knows why the gateway is logged out).
        self.other_stored: list[str] = []
        #: The paid endpoint as clients see it, and where the plugin's own server listens
        #: (``None`` when there is no endpoint, or it is mounted on the host's app).
        self.paid_endpoint_url: str | None = None
        self.paid_endpoint_bound_url: str | None = None
        #: The paid A2A agent's interface URLs, as its card lists them (JSON-RPC first; empty
        #: without ``enablePaidA2A``): svc_registerAgent registers them as the agent's endpoints.
        self.paid_a2a_urls: list[str] = []
        #: Plans this session bought or paid with (insertion order): the balance context shows
        #: them even when the config names no plan.
        self.used_plans: dict[str, None] = {}
        self._client: ServiceClient | None = None
        self._public: ServiceClient | None = None
        self._listeners: list[Callable[[], None]] = []
        self._spend_listeners: list[Callable[[str], None]] = []
        self._balance_listeners: list[Callable[[str, PlanBalance, Session | None], None]] = []
        #: where a receipt of something this account paid for goes (``/svc_spend``)
        self.receipt_sink: Callable[..., None] | None = None
        #: who approves purchases, and the mandates (shared by every chat user's core)
        self.approvals: Approvals | None = None
        self._lock = asyncio.Lock()
        #: the seller's settings, and what they were built from (:attr:`settings`)
        self._settings: tuple[tuple[object, ...], SellerSettings] | None = None

    # -- session -----------------------------------------------------------------------------

    def restore_session(self) -> None:
        """Pick the key: config's ``svcApiKey`` wins over a stored one (synchronous).

        The configured environment binds the key: only a key stored for it is used, and a
        stored key whose own prefix names another environment is ignored. Keys stored for
        other environments are only listed (:attr:`other_stored`), never loaded into a session.
        """
        env = self.config.environment
        key = self.config.api_key if self.identity is None else None  # the operator's, only
        if key is not None:  # the config validator refused a key for another environment
            self.session = Session(key, env, "config")
            return
        try:
            secret = self.store.load(env)
            if secret is None and self.store.path.exists():
                self.other_stored = [e for e in ENVIRONMENTS if e != env and self.store.load(e)]
        except Exception:  # a broken keyring must not stop the gateway from starting
            log.warning("could not read the stored svc credential; run /svc_login")
            return
        if secret is None:
            return
        try:
            parsed = parse_api_key(secret)
        except ConfigError:
            log.warning("the stored svc credential is not a valid key; run /svc_login again")
            return
        if parsed.environment not in (None, env):
            self.other_stored = [parsed.environment]
            return
        self.session = Session(parsed, env, "stored")

    @property
    def environment(self) -> str:
        return self.session.environment if self.session else self.config.environment

    @property
    def settings(self) -> SellerSettings:
        """What selling reads of this account (:class:`~svc_gateway.service.seller.Seller`):
        rebuilt when the plan, the agent or the session changes, else the same record."""
        made_of = (self.config, self.plan_id, self.agent_id, self.session)
        kept = self._settings
        if kept is None or any(a is not b for a, b in zip(kept[0], made_of, strict=True)):
            from ..service.seller import SellerSettings

            settings = SellerSettings.from_config(
                self.config,
                environment=self.environment,
                plan_id=self.plan_id,
                agent_id=self.agent_id,
                queue_dir=self.store.path.parent,
                owner=self.session.address if self.session is not None else None,
            )
            kept = self._settings = (made_of, settings)
        return kept[1]

    @property
    def base_url(self) -> str:
        return resolve_base_url(self.config, self.environment)

    def on_session_change(self, listener: Callable[[], None]) -> None:
        """Called after login/logout (caches drop everything derived from the old key)."""
        self._listeners.append(listener)

    def on_spend(self, listener: Callable[[str], None]) -> None:
        """Called with a plan id after the plugin spent or bought credits on it."""
        self._spend_listeners.append(listener)

    def spent(self, plan_id: str) -> None:
        if plan_id and plan_id not in self.used_plans:
            # replaced, never changed in place: the context reads it from other threads
            self.used_plans = {**self.used_plans, plan_id: None}
        for listener in self._spend_listeners:
            listener(plan_id)

    def paid_for(self, what: str, plan_id: str, receipt: object) -> None:
        """Keep the receipt of something this account paid (an agent's answer): never raises."""
        if self.receipt_sink is None or not isinstance(receipt, dict) or self.session is None:
            return
        try:
            credits = int(str(receipt.get("creditsRedeemed", "0")))
        except ValueError:
            credits = 0
        transaction = receipt.get("transaction")
        self.receipt_sink(
            what=what,
            payer=self.session.address,
            identity=self.identity,
            plan_id=plan_id,
            credits=credits,
            transaction=str(transaction) if transaction else None,
            status="settled",
            at=time.time(),
        )

    def on_balance(self, listener: Callable[[str, PlanBalance, Session | None], None]) -> None:
        """Called with a plan id, the balance and the session it was read under whenever a tool
        read the account's balance."""
        self._balance_listeners.append(listener)

    def balance_read(self, plan_id: str, balance: PlanBalance, session: Session | None) -> None:
        for listener in self._balance_listeners:
            listener(plan_id, balance, session)

    async def set_session(self, session: Session | None) -> None:
        if session is not None:
            self.other_stored = []
        self.used_plans = {}  # another account's plans are not this one's
        async with self._lock:
            old = [c for c in (self._client, self._public) if c is not None]
            self._client = self._public = None
            self.session = session
            for client in old:
                await client.aclose()
        for listener in self._listeners:
            listener()

    async def login(self, raw_key: str | SecretStr) -> tuple[Session, str]:
        """Validate, store and activate a key. Returns the session and where it was stored."""
        key = parse_api_key(raw_key)
        env = self.config.environment
        refuse_other_environment(key, env)
        resolve_base_url(self.config, env)  # fail before storing when env has no URL
        await self._check_key(key, env)
        where = await asyncio.to_thread(self.store.save, env, key.secret.get_secret_value())
        source: KeySource = "keyring" if where == "keyring" else "file"
        session = Session(key, env, source)
        await self.set_session(session)
        return session, where

    async def _check_key(self, key: ApiKey, env: str) -> None:
        """One authenticated read with ``key``; a key the service refuses is never stored."""
        client = self._new_client(key, env)
        try:
            await client.list_plans(page=1, page_size=1)
        except AuthenticationError:
            raise ConfigError(
                "the service refused this API key (its signature is invalid, or it was revoked "
                "or is for another environment); copy the key again from the dashboard"
            ) from None
        except PermissionDenied:
            pass  # the key is genuine; it may just not list plans
        except ServiceError as exc:
            raise KeyUnchecked(
                f"the key could not be checked with the service ({exc.code}); try again when "
                "the service is reachable"
            ) from None
        finally:
            await client.aclose()

    async def check_key(self) -> None:
        """The session's key against the service: :class:`ConfigError` when it is refused,
        :class:`KeyUnchecked` (a ``ConfigError`` too) when the service could not say."""
        if self.session is None:
            raise NotLoggedIn()
        await self._check_key(self.session.key, self.session.environment)

    async def logout(self) -> bool:
        had = self.session is not None
        self.other_stored = []
        await asyncio.to_thread(self.store.delete_all)
        await self.set_session(None)
        return had

    # -- clients -----------------------------------------------------------------------------

    def _new_client(self, key: ApiKey | None, environment: str | None = None) -> ServiceClient:
        from ..service.client import ServiceClient

        env = environment or self.environment
        return ServiceClient(
            resolve_base_url(self.config, env),
            key.secret if key else None,
            environment=env,
            api_version=self.config.api_version,
            timeout=self.config.request_timeout_secs,
            session_factory=self.session_factory,
        )

    def client(self) -> ServiceClient:
        """The authenticated client (it lives on the plugin loop); raises
        :class:`NotLoggedIn` when nobody is logged in."""
        if self.session is None:
            if self.identity is not None:
                raise NotLoggedIn(
                    "You have no payments account on this gateway yet",
                    hint=USER_LOGIN_HINT,
                )
            raise NotLoggedIn()
        if self._client is None:
            self._client = self._new_client(self.session.key)
        return self._client

    def public_client(self) -> ServiceClient:
        """A client for public reads (plans, balances of an address) that needs no key."""
        if self.session is not None:
            return self.client()
        if self._public is None:
            self._public = self._new_client(None)
        return self._public

    async def aclose(self) -> None:
        for client in (self._client, self._public):
            if client is not None:
                await client.aclose()
        self._client = self._public = None
