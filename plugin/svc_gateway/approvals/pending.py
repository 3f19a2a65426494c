"""Pending purchases: what waits for the person's ``/svc_approve <code>``, bound to them.

A code binds the account (whose money), the chat user who caused it when the host named one,
the plan, the amount and the kind of purchase; it works once and expires after
``approvalTtlSecs``. Kept in this process: the code is answered by the replica that made it.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

#: no 0/O, 1/I/L: a code read aloud or retyped from a phone stays the same code
ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
CODE_LENGTH = 6
#: the confirmation word the plugin shows the person with what a code buys
CONFIRM_LENGTH = 4
#: pending purchases one account may have at once (the oldest is dropped past it)
MAX_PER_ACCOUNT = 50

#: what approving does: runs the purchase and returns the reply the person reads
Action = Callable[[], Awaitable[str]]


@dataclass(frozen=True)
class Who:
    """Whose money (``account``: ``channel:sender`` of a hosted user, ``""`` for the gateway's
    own account) and which chat user asked (``caller``; ``""`` when the host named nobody)."""

    account: str
    caller: str = ""


@dataclass
class Pending:
    """One purchase waiting for approval."""

    code: str
    who: Who
    kind: str  # order | card_order | query | tool | token
    plan_id: str
    amount_micro: int
    currency: str
    summary: str
    expires_at: float
    action: Action | None = None
    #: a metered call or a token approved once: the key of the call it lets through
    grant_key: str = ""
    created: float = field(default_factory=time.time)
    #: the amount includes buying the plan again (a top-up its delegation may pay)
    top_up: bool = False
    #: who is paid, from the service's record of the plan
    pay_to: tuple[str, ...] = ()
    #: the word the plugin last showed the person to confirm with (``""``: not shown yet)
    confirm: str = ""

    def line(self) -> str:
        return f"/svc_approve {self.code}"


class PendingBook:
    """The pending purchases of this process; thread-safe."""

    def __init__(self, ttl_secs: float, clock: Callable[[], float] = time.time) -> None:
        self.ttl_secs = ttl_secs
        self.clock = clock
        self._lock = threading.Lock()
        self._items: dict[str, Pending] = {}

    def add(
        self,
        who: Who,
        kind: str,
        plan_id: str,
        amount_micro: int,
        currency: str,
        summary: str,
        *,
        action: Action | None = None,
        grant_key: str = "",
        top_up: bool = False,
        pay_to: tuple[str, ...] = (),
    ) -> Pending:
        with self._lock:
            self._expire()
            mine = [p for p in self._items.values() if p.who.account == who.account]
            for old in mine[: max(len(mine) - MAX_PER_ACCOUNT + 1, 0)]:
                del self._items[old.code]
            code = _new_code(self._items)
            item = Pending(
                code,
                who,
                kind,
                plan_id,
                amount_micro,
                currency,
                summary,
                self.clock() + self.ttl_secs,
                action,
                grant_key,
                top_up=top_up,
                pay_to=pay_to,
            )
            self._items[code] = item
            return item

    def show(self, code: str, who: Who, *, authorized: bool) -> Pending | str:
        """The pending purchase ``code`` names, kept, with a fresh confirmation word for the
        person (shown by the plugin, never by the model); or why not, as the reply."""
        code = code.strip().upper()
        with self._lock:
            item = self._items.get(code)
            if item is None or not self._is_theirs(item, who, authorized):
                return f"No pending purchase of yours has the code {code[:12] or '(none)'}."
            if item.expires_at <= self.clock():
                del self._items[code]
                return f"The code {code} expired; nothing was bought. Ask again for a new code."
            item.confirm = "".join(secrets.choice(ALPHABET) for _ in range(CONFIRM_LENGTH))
            return item

    def take(self, code: str, who: Who, *, authorized: bool, confirm: str | None) -> Pending | str:
        """The pending purchase ``code`` names, removed (it works once); or why not, as the
        reply. Another user's code is answered as an unknown one. ``confirm``: the word the
        plugin showed with :meth:`show` (``None``: dropping it, as ``/svc_deny`` does)."""
        code = code.strip().upper()
        with self._lock:
            item = self._items.get(code)
            if item is None or not self._is_theirs(item, who, authorized):
                return f"No pending purchase of yours has the code {code[:12] or '(none)'}."
            if confirm is not None and (
                not item.confirm or not secrets.compare_digest(item.confirm, confirm.upper())
            ):
                item.confirm = ""  # a wrong word: the person must look at the purchase again
                return (
                    f"That is not the confirmation the plugin showed for {code}; nothing was "
                    f"bought. Type /svc_approve {code} to see what it buys and its confirmation."
                )
            del self._items[code]
        if item.expires_at <= self.clock():
            return f"The code {code} expired; nothing was bought. Ask again for a new code."
        return item

    @staticmethod
    def _is_theirs(item: Pending, who: Who, authorized: bool) -> bool:
        if item.who.account != who.account:
            return False
        if item.who.caller:
            return item.who.caller == who.caller
        return authorized  # the host named nobody: the gateway's authorised user

    def of(self, account: str) -> list[Pending]:
        with self._lock:
            self._expire()
            return [p for p in self._items.values() if p.who.account == account]

    def _expire(self) -> None:
        now = self.clock()
        for code in [c for c, p in self._items.items() if p.expires_at <= now - 60]:
            del self._items[code]


def _new_code(taken: dict[str, Pending]) -> str:
    while True:
        code = "".join(secrets.choice(ALPHABET) for _ in range(CODE_LENGTH))
        if code not in taken:
            return code
