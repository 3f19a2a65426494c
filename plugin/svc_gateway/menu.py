"""The plugin's slash commands as a host lists them (name, description, arguments), without
importing their handlers: a plugin that starts at first use registers them from here."""

from __future__ import annotations

from dataclasses import dataclass

from .host import CommandHandler, CommandSpec


@dataclass(frozen=True)
class MenuEntry:
    """One command as a host's menu shows it; :meth:`spec` binds it to its handler."""

    name: str
    description: str
    accepts_args: bool
    args_hint: str = ""

    def spec(self, handler: CommandHandler) -> CommandSpec:
        return CommandSpec(self.name, self.description, self.accepts_args, handler, self.args_hint)


LOGIN = MenuEntry(
    "svc_login",
    "Log in to the payments service (browser, or <env>:<API_KEY> headless)",
    True,
    "[env | env:API_KEY | status]",
)
LOGOUT = MenuEntry("svc_logout", "Log out of the payments service and forget the key", False)
SPEND = MenuEntry("svc_spend", "What you paid for on this gateway", False)
EARNINGS = MenuEntry("svc_earnings", "What this gateway earned (operator only)", False)
APPROVE = MenuEntry(
    "svc_approve", "Approve a pending purchase with its code (only you can)", True, "<code>"
)
DENY = MenuEntry("svc_deny", "Drop a pending purchase", True, "<code>")
ALLOW = MenuEntry(
    "svc_allow",
    "Let paid queries spend up to an amount without a code (or list, or off)",
    True,
    "[5 USD per day | off]",
)
#: Every command a registered plugin offers, in the order it registers them.
MENU: tuple[MenuEntry, ...] = (LOGIN, LOGOUT, SPEND, EARNINGS, APPROVE, DENY, ALLOW)
