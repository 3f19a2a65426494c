"""The two slash commands: ``/svc_login`` and ``/svc_logout``.

``/svc_login <env>:<KEY>`` works on headless servers; ``/svc_login env:<VARIABLE>`` reads the
key from an environment variable the operator set (so it is never typed into a chat or a
terminal history); ``/svc_login [env]`` runs the browser flow and answers at once with the URL
to open, finishing in the background. A key is checked with one authenticated read before it is
stored. Replies name the account address, never the key.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..account.core import PluginCore
from ..account.receipts import ReceiptBook, spend_text
from ..approvals.commands import approval_specs
from ..approvals.money import PlanValue, plan_value
from ..config import ENVIRONMENTS, ConfigError, PluginConfig, resolve_base_url
from ..host import Caller, CommandContext, CommandSpec
from ..menu import EARNINGS, LOGIN, LOGOUT, SPEND
from ..redact import get_logger
from ..service.errors import ServiceError
from .browser_login import BrowserLogin, LoginError, manual_instructions
from .earnings import Sales, earnings_text

if TYPE_CHECKING:
    from .accounts import UserAccounts

log = get_logger("svc_gateway.commands")

CONSOLE_NOTE = (
    "(Each chat user has their own account on this gateway; this command was typed at the "
    "gateway's console, so it acts on the gateway's own account.)"
)
#: per-user accounts, and the host named no sender and did not mark its console: fail closed
NO_SENDER = (
    "This command came without a sender, so it has no payments account on this gateway and "
    "changed nothing. Send it from a chat where you are identified."
)
USER_LOGIN_USAGE = (
    "Send /svc_login new to let this gateway's operator open a payments account for you, "
    "/svc_login <env>:<API_KEY> to link your own, or /svc_login status."
)

LOGIN_USAGE = (
    "Usage: /svc_login [sandbox|live|local] to log in with the browser (the environment this "
    "gateway is configured for), /svc_login env:SVC_API_KEY to "
    "read the key from an environment variable set before the gateway started, "
    "/svc_login <environment>:<API_KEY> (headless), or /svc_login status."
)
#: ``env:NAME`` reads the key from the environment variable NAME.
_ENV_VAR = re.compile(r"env:([A-Za-z_][A-Za-z0-9_]*)")
SAFER_LOGIN = (
    "Next time, log in without typing the key: /svc_login for the browser flow, or set "
    "SVC_API_KEY=<env>:<key> in the gateway's environment and send /svc_login env:SVC_API_KEY."
)


def _where(where: str, core: PluginCore) -> str:
    if where == "keyring":
        return "in the system keyring"
    return f"in a private file readable only by you ({core.store.path})"


def resolve_frontend_url(config: PluginConfig, environment: str, base_url: str) -> str:
    """The web app root for the browser login: ``frontendUrl``, env var, else the API origin."""
    if config.frontend_url:
        return config.frontend_url
    from_env = os.environ.get(f"SVC_{environment.upper()}_FRONTEND_URL")
    if from_env:
        return from_env.rstrip("/")
    return re.sub(r"/api/v\d+$", "", base_url)


class Commands:
    """Command handlers bound to one plugin core."""

    def __init__(
        self,
        core: PluginCore,
        *,
        open_browser: Callable[[str], bool] | None = None,
        input_history: str | None = None,
        accounts: UserAccounts | None = None,
    ) -> None:
        self.core = core
        #: a hosted gateway's chat users (``perUserAccounts``): each logs in for themselves
        self.accounts = accounts
        #: receipts of the metered tool calls (``/svc_spend``, ``/svc_earnings``)
        self.receipts = ReceiptBook()
        #: the ways in that sell besides metered tools (paid endpoint, MCP, routes)
        self.sales = Sales()
        self.open_browser = open_browser
        #: A file where the host keeps typed lines (the Hermes CLI's history), if it has one.
        self.input_history = input_history
        self.pending: BrowserLogin | None = None
        self._pending_task: asyncio.Task[None] | None = None
        self.last_browser_result: str | None = None

    async def login(self, ctx: CommandContext) -> str:
        if not ctx.is_authorized_sender:
            return "Only an authorised user of this gateway may log it in to the payments service."
        args = ctx.args.strip()
        if self.unidentified(ctx):
            return NO_SENDER
        caller = self.chat_user(ctx)
        if caller is not None:
            return await self._user_login(caller, args)
        if args.lower() == "status":
            if self.accounts is not None and self.accounts.enabled and not ctx.sender_id:
                return f"{self.status()} {CONSOLE_NOTE}"
            return self.status()
        if match := _ENV_VAR.fullmatch(args):
            return await self._login_from_env(match.group(1))
        if ":" in args:
            return await self._login_with_key(args, typed=True)
        if args and args.lower() not in ENVIRONMENTS:
            return f"'{args[:20]}' is not an environment or an API key. {LOGIN_USAGE}"
        configured = self.core.config.environment
        if args and args.lower() != configured:
            return (
                f"This gateway is configured for {configured}; use /svc_login (a key for "
                f"{args.lower()} would not be used here). To use {args.lower()}, set environment: "
                f"{args.lower()} in the plugin config and restart the gateway."
            )
        return await self._browser_login(configured)

    def unidentified(self, ctx: CommandContext) -> bool:
        """Per-user accounts, and the host named no sender nor marked its local console: the
        command acts on no account at all (never the operator's: fail closed)."""
        if self.accounts is None or not self.accounts.enabled:
            return False
        return not ctx.sender_id and not ctx.is_local_console

    def chat_user(self, ctx: CommandContext) -> Caller | None:
        """The chat user a command acts for on a hosted gateway; ``None``: the gateway's own
        account (single-user gateway, the host's local console, or an operator). Callers check
        :meth:`unidentified` first."""
        if self.accounts is None or not self.accounts.enabled or not ctx.sender_id:
            return None
        caller = Caller(ctx.sender_id, ctx.channel or "")
        return None if self.accounts.is_operator(caller) else caller

    async def _user_login(self, caller: Caller, args: str) -> str:
        assert self.accounts is not None
        core = self.accounts.core_for(caller)
        lowered = args.lower()
        if lowered == "status":
            if core.session is None:
                return f"You have no payments account on this gateway. {USER_LOGIN_USAGE}"
            return (
                f"Your payments account here: {core.session.address} "
                f"({self._key_origin(core.session.source, core)})."
            )
        if lowered == "new":
            return await self.accounts.onboard(caller)
        if _ENV_VAR.fullmatch(args):
            return (
                "Environment variables hold the gateway operator's key, not yours. "
                + USER_LOGIN_USAGE
            )
        if ":" in args:
            try:
                session, where = await core.login(args)
            except ConfigError as exc:
                return f"Login failed: {str(exc).rstrip('.')}. Nothing was stored."
            except OSError:
                log.exception("could not store a chat user's svc credential")
                return "Login failed: the key could not be stored (see the gateway log)."
            place = "the system keyring" if where == "keyring" else "a private file on the gateway"
            return (
                f"Linked your own payments account {session.address}; the key is kept in "
                f"{place}. Please delete the chat message that contains your API key."
            )
        return "A browser login would log in the gateway's machine, not you. " + USER_LOGIN_USAGE

    async def _login_from_env(self, name: str) -> str:
        raw = os.environ.get(name, "").strip()
        if not raw:
            return (
                f"Login failed: the environment variable {name} is not set in the gateway's "
                f"environment. Set {name}=<env>:<API_KEY> before starting the gateway, then "
                f"send /svc_login env:{name} again."
            )
        return await self._login_with_key(raw, typed=False, origin=f"the variable {name}")

    async def _login_with_key(self, raw: str, *, typed: bool, origin: str = "the key") -> str:
        await self.cancel_pending()  # a newer login replaces an older browser flow and its note
        self.last_browser_result = None
        try:
            session, where = await self.core.login(raw)
        except ConfigError as exc:
            text = str(exc).rstrip(".")
            if typed:
                return f"Login failed: {text}. Nothing was stored. {LOGIN_USAGE}"
            return f"Login failed ({origin}): {text}. Nothing was stored."
        except OSError:
            log.exception("could not store the svc credential")
            return "Login failed: the key could not be stored (see the gateway log)."
        lines = [
            f"Logged in to the {session.environment} environment as {session.address}.",
            f"The key is stored {_where(where, self.core)}.",
        ]
        if typed:
            lines.append("Please delete the chat message that contains your API key.")
            if self.input_history:
                lines.append(
                    f"This terminal also keeps what you type in its input history "
                    f"({self.input_history}): remove the /svc_login line from that file."
                )
            lines.append(SAFER_LOGIN)
        if self.core.config.svc_api_key is not None:
            lines.append("Note: svcApiKey in the plugin config takes precedence after a restart.")
        return " ".join(lines)

    async def _browser_login(self, environment: str) -> str:
        try:
            base_url = resolve_base_url(self.core.config, environment)
        except ConfigError as exc:
            return f"Login failed: {exc}."
        frontend = resolve_frontend_url(self.core.config, environment, base_url)
        await self.cancel_pending()
        self.last_browser_result = None
        session = self.core.session
        who = (
            f"You are logged in to {session.environment} as {session.address}; a browser "
            "login replaces that key when it completes (/svc_login status shows who is logged "
            "in). "
            if session is not None
            else ""
        )
        flow = await BrowserLogin.start(
            frontend, open_browser=self.open_browser, environment=environment
        )
        self.pending = flow
        self._pending_task = asyncio.ensure_future(self._finish(flow))
        if flow.browser_opened:
            return who + (
                "A browser window opened to log in to the payments service; finish there "
                f"within 5 minutes. If it did not open, visit: {flow.login_url}"
            )
        return who + manual_instructions(flow.login_url, frontend)

    async def _finish(self, flow: BrowserLogin) -> None:
        try:
            key = await flow.wait()
            session, where = await self.core.login(key.secret)
            self.last_browser_result = (
                f"Browser login complete: {session.environment} as {session.address}, "
                f"key stored {_where(where, self.core)}."
            )
            log.info("svc browser login complete for %s", session.address)
        except LoginError as exc:
            self.last_browser_result = f"Browser login did not complete: {exc}"
        except ConfigError as exc:
            self.last_browser_result = f"Browser login failed: {str(exc).rstrip('.')}."
        except OSError as exc:
            self.last_browser_result = f"Browser login failed: {type(exc).__name__}"
        finally:
            await flow.close()
            if self.pending is flow:
                self.pending = None

    async def cancel_pending(self) -> None:
        flow, task = self.pending, self._pending_task
        self.pending = self._pending_task = None
        if flow is not None:
            flow.cancel()
            await flow.close()
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def _key_origin(self, source: str, core: PluginCore | None = None) -> str:
        if core is not None and core.identity is not None:  # never a path on the gateway
            return {"keyring": "key in the system keyring"}.get(source, "key kept by the gateway")
        return {
            "config": "key from the plugin config",
            "keyring": "key in the system keyring",
            "file": f"key in {self.core.store.path}",
        }.get(source, "key stored by an earlier /svc_login")

    def status(self) -> str:
        session = self.core.session
        parts = []
        if session is None:
            parts.append("Not logged in to the payments service.")
            for other in self.core.other_stored:
                parts.append(
                    f"A key for {other} is stored; this gateway is configured for "
                    f"{self.core.config.environment}, so that key is not used."
                )
            parts.append(LOGIN_USAGE)
        else:
            parts.append(
                f"Logged in to {session.environment} as {session.address} "
                f"({self._key_origin(session.source)})."
            )
        if self.pending is not None:
            parts.append(f"A browser login is waiting: {self.pending.login_url}")
        elif self.last_browser_result:
            parts.append(self.last_browser_result)
        return " ".join(parts)

    async def logout(self, ctx: CommandContext) -> str:
        if not ctx.is_authorized_sender:
            return "Only an authorised user of this gateway may log it out."
        if self.unidentified(ctx):
            return NO_SENDER
        caller = self.chat_user(ctx)
        if caller is not None:
            assert self.accounts is not None
            had = await self.accounts.core_for(caller).logout()
            if had:
                return "Logged out: your key was removed from this gateway."
            return "You had no payments account on this gateway; nothing was kept."
        await self.cancel_pending()
        self.last_browser_result = None
        had = await self.core.logout()
        text = (
            "Logged out: the stored API key was removed and cached balances were dropped."
            if had
            else "You were not logged in; any stored API key has been removed."
        )
        if self.core.config.svc_api_key is not None:
            text += " svcApiKey is still set in the plugin config; remove it there as well."
        return text

    async def spend(self, ctx: CommandContext) -> str:
        """``/svc_spend``: what the calling user paid (the gateway's own account at the host's
        console or on a single-user gateway), in money at each plan's price and in credits."""
        if self.unidentified(ctx):
            return NO_SENDER
        caller = self.chat_user(ctx)
        if caller is not None:
            items = self.receipts.of(caller.identity, None)
        else:
            session = self.core.session
            items = self.receipts.of(None, session.address if session else None)
        return spend_text(items, await self._plan_values({r.plan_id for r in items}))

    async def _plan_values(self, plan_ids: set[str]) -> dict[str, PlanValue]:
        """Each plan's price, read from the service (a plan it cannot read has none)."""
        values: dict[str, PlanValue] = {}
        for plan_id in sorted(plan_ids):
            try:
                values[plan_id] = plan_value(await self.core.public_client().get_plan(plan_id))
            except ServiceError:
                continue
        return values

    async def earnings(self, ctx: CommandContext) -> str:
        """``/svc_earnings``: what this gateway sold (never what it bought); the operator's
        view, refused to every other chat user (and to a command without a sender)."""
        if not ctx.is_authorized_sender or self.unidentified(ctx) or self.chat_user(ctx):
            return "Only the gateway's operator can see its earnings."
        return await earnings_text(self.sales, self.receipts.sales())

    def specs(self) -> list[CommandSpec]:
        runtime = self.core.runtime

        async def spend(ctx: CommandContext) -> str:
            return await runtime.run(self.spend(ctx))

        async def earnings(ctx: CommandContext) -> str:
            return await self.earnings(ctx)

        async def login(ctx: CommandContext) -> str:
            return await runtime.run(self.login(ctx))

        async def logout(ctx: CommandContext) -> str:
            return await runtime.run(self.logout(ctx))

        specs = [LOGIN.spec(login), LOGOUT.spec(logout), SPEND.spec(spend), EARNINGS.spec(earnings)]
        if self.core.approvals is not None:  # /svc_approve, /svc_deny, /svc_allow
            specs += approval_specs(self.core.approvals, self, runtime)
        return specs
