"""Per-chat-user accounts of a hosted gateway: each caller acts with their own key.

With ``perUserAccounts``, every tool, command and balance context of a chat user the host names
runs on that user's own :class:`~svc_gateway.account.core.PluginCore`: their key (linked with
``/svc_login <env>:<KEY>``, or a white-label customer account the operator's organization opens
for them with ``/svc_login new``), kept in the credential store under their identity. The
operator's core (config ``svcApiKey`` or the operator's login) is used only for callers listed in
``operatorIds``, for tools of hosts that name nobody, for commands the host marks as typed at its
local console, and to onboard users. A command without a sender has no account at all.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..account.core import PluginCore
from ..config import ConfigError
from ..host import Caller
from ..redact import get_logger
from ..service.errors import ServiceError

if TYPE_CHECKING:
    from .context import BalanceContext

log = get_logger("svc_gateway.accounts")

#: chat users remembered at once (their cores hold an HTTP session each)
MAX_USERS = 4096
_UNSAFE = re.compile(r"[^a-z0-9-]+")


def identity_digest(identity: str) -> str:
    """A file-system-safe name for an identity (never the sender id itself)."""
    return hashlib.sha256(identity.encode()).hexdigest()[:32]


def customer_email(caller: Caller, domain: str) -> str:
    """The address a chat user is onboarded under: the same user always gets the same one, so
    onboarding again (a lost key) returns the same account. The readable part is folded; the
    digest is of the exact identity, so two channels that fold alike (``Slack``/``slack``,
    ``team.a``/``team_a``) still get two addresses."""
    local = f"{_UNSAFE.sub('-', caller.channel.lower())}.{identity_digest(caller.identity)[:20]}"
    return f"{local.strip('.-') or 'user'}@{domain}"


class UserAccounts:
    """The chat users' cores, created on first use; the operator's core for everyone else."""

    def __init__(
        self,
        operator: PluginCore,
        make_context: Callable[[PluginCore], BalanceContext] | None = None,
    ) -> None:
        self.operator = operator
        self.config = operator.config
        self._make_context = make_context
        self._users: dict[str, PluginCore] = {}
        self._contexts: dict[str, BalanceContext] = {}
        self._onboarding: dict[str, asyncio.Lock] = {}
        #: hosts call from their own threads and loops: one core per identity, never two
        self._lock = threading.Lock()
        operator.runtime.add_closer(self.aclose)

    @property
    def enabled(self) -> bool:
        return self.config.per_user_accounts

    def is_operator(self, caller: Caller | None) -> bool:
        """The host named nobody, or the caller is listed in ``operatorIds`` as
        ``channel:sender`` (a bare sender id only matches a caller without a channel: the same
        number on another platform is somebody else)."""
        if caller is None:
            return True
        ids = self.config.operator_ids
        return caller.identity in ids or (not caller.channel and caller.sender_id in ids)

    def core_for(self, caller: Caller | None) -> PluginCore:
        """The core a call of ``caller`` runs on: their own with ``perUserAccounts``."""
        if not self.enabled or caller is None or self.is_operator(caller):
            return self.operator
        identity = caller.identity
        with self._lock:
            core = self._users.get(identity)
            if core is None:
                op = self.operator
                core = PluginCore(
                    op.config,
                    op.runtime,
                    store=op.store.for_user(identity, identity_digest(identity)),
                    session_factory=op.session_factory,
                    clock=op.clock,
                    identity=identity,
                )
                core.receipt_sink = op.receipt_sink
                core.approvals = op.approvals
                core.restore_session()
                if len(self._users) >= MAX_USERS:
                    self._forget_one()
                self._users[identity] = core
        return core

    def context_for(self, caller: Caller | None) -> BalanceContext | None:
        """The balance context of a chat user (``None``: use the gateway's own)."""
        core = self.core_for(caller)
        if core is self.operator or self._make_context is None or core.identity is None:
            return None
        with self._lock:
            context = self._contexts.get(core.identity)
            if context is None:
                context = self._contexts[core.identity] = self._make_context(core)
        return context

    def _forget_one(self) -> None:
        """Forget the user seen first (their key stays stored; a later call restores it)."""
        identity = next(iter(self._users))
        core = self._users.pop(identity)
        self._contexts.pop(identity, None)
        self.operator.runtime.submit(core.aclose())

    async def aclose(self) -> None:
        with self._lock:
            cores, self._users = list(self._users.values()), {}
        for core in cores:
            await core.aclose()

    async def onboard(self, caller: Caller) -> str:
        """``/svc_login new``: the operator's organization opens a white-label customer account
        for this user (their consent is the command), stored under their identity. The reply
        names the account address, never the key."""
        core = self.core_for(caller)
        if core is self.operator:
            return "You act as this gateway's own account here; there is nothing to open."
        if core.session is not None:
            return (
                f"You already have a payments account here ({core.session.address}). "
                "/svc_logout removes it from this gateway."
            )
        lock = self._onboarding.setdefault(caller.identity, asyncio.Lock())
        async with lock:
            if core.session is not None:
                return f"Your payments account is ready: {core.session.address}."
            try:
                client = self.operator.client()
            except ServiceError:
                return (
                    "This gateway cannot open accounts: its operator is not logged in. Link "
                    "your own key instead: /svc_login <env>:<API_KEY>."
                )
            email = customer_email(caller, self.config.customer_email_domain)
            try:
                made = await client.onboard_customer(email, self.config.organization_id)
            except ServiceError as exc:
                log.warning("onboarding a chat user failed: %s", exc.code)
                return (
                    f"The payments service did not open an account ({exc.code}): {exc.message}. "
                    "Try again later, or link your own key: /svc_login <env>:<API_KEY>."
                )
            if made.consent_required or made.api_key is None:
                return (
                    "That address belongs to an existing account; its owner was asked by email "
                    "to consent. Send /svc_login new again once they have."
                )
            try:
                session, where = await core.login(made.api_key)
            except (ConfigError, OSError) as exc:
                log.warning("could not keep a chat user's new key: %s", type(exc).__name__)
                return "The account was opened but its key could not be stored; try again."
        place = "the system keyring" if where == "keyring" else "a private file on the gateway"
        return (
            f"Your payments account is open: {session.address} (a customer account of this "
            f"gateway's operator). Its key is kept in {place} and never shown. Buy credits with "
            "svc_orderFiatPlan (your own checkout link) or svc_orderPlan; /svc_logout removes "
            "the key."
        )
