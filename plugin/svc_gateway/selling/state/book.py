"""Exact billing without holds: admit a paid request only when the payer can pay for it.

Verify is a dry run that reserves nothing (WIRE.md §4), so N concurrent requests can all pass
it and then overdraw. The endpoint keeps, per (plan, payer), the payer's balance as it last
knew it and the credits of the requests it has admitted but not yet settled; a request is
admitted when ``balance - in_flight >= amount``, or when nothing is in flight for that payer:
verify, which the request has passed, is authoritative for one request (a token backed by a
delegation pays for the plan at settle when the payer is short: automatic top-up, issue 15).
So a payer short of known credits is served one request at a time until a settle shows the
new balance; an answer whose settle is refused is withheld either way.

The balance is read from the balance endpoint once (concurrent misses share the read), then
kept current from settle receipts: each success subtracts what it burned, and a
``remainingBalance`` lower than any ordering of our own settles can explain (someone spent
elsewhere) lowers it; one higher than the book knows with nothing in flight (a top-up, a
purchase) makes the next admission read the balance again. A settle refused for want of
credits zeroes what is available until the in-flight requests are done; the balance is then
read again. So is a balance that was last read long ago, or one that falls short of a request
verify saw enough credits for.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

#: a balance read this long ago is read again before the next admission with nothing in flight
BALANCE_TTL_SECS = 60.0
#: payers remembered; idle ones (nothing in flight) are forgotten first
MAX_ACCOUNTS = 10_000

BalanceRead = Callable[[str, str], Awaitable[int]]
T = TypeVar("T")


async def read_once(
    loading: dict[tuple[str, str], asyncio.Future[T]],
    key: tuple[str, str],
    read: Callable[[], Awaitable[T]],
) -> T:
    """Run ``read`` for ``key`` unless one already runs: concurrent callers share its result
    or its error (``loading`` holds the reads in progress). A caller cancelled while waiting
    is cancelled alone; when the shared read is cancelled, each waiter runs its own."""
    pending = loading.get(key)
    if pending is not None:
        try:
            return await asyncio.shield(pending)
        except asyncio.CancelledError:
            if not pending.cancelled():
                raise  # this request was cancelled, not the shared read
            return await read_once(loading, key, read)  # the reader was: read ourselves
    future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
    loading[key] = future
    try:
        result = await read()
    except BaseException as exc:
        if isinstance(exc, asyncio.CancelledError):
            future.cancel()
        else:
            future.set_exception(exc)
            future.exception()  # retrieved: each waiter re-raises it itself
        raise
    else:
        future.set_result(result)
        return result
    finally:
        del loading[key]


@dataclass
class _Account:
    balance: int = 0
    in_flight: int = 0
    read_at: float | None = None  # None: never read, or marked stale
    loaded: bool = False  # read at least once (a restored account is read despite its claims)
    burned: int = 0  # credits settled so far: a read that overlaps a settle is corrected by it

    @property
    def available(self) -> int:
        return self.balance - self.in_flight


@dataclass(frozen=True, slots=True)
class Admission:
    """One admitted request's claim on the payer's credits; closed by exactly one of
    :meth:`CreditBook.settled`, :meth:`CreditBook.release`, :meth:`CreditBook.refused`."""

    plan_id: str
    payer: str
    amount: int
    #: a shared book's name for the claim (its claims expire); empty in the in-process book
    claim_id: str = ""


#: what every admission refusal's reason says (a caller tells it from the service's own)
IN_PROGRESS_NOTE = "available after the requests already in progress"


@dataclass(frozen=True, slots=True)
class Refusal:
    """Not enough credits: what the payer has left after the requests already in flight."""

    available: int
    amount: int

    @property
    def reason(self) -> str:
        return (
            f"insufficient credits: {max(self.available, 0)} {IN_PROGRESS_NOTE}, "
            f"{self.amount} requested"
        )


class CreditBook:
    """Per (plan, payer): the known balance and the credits in flight. Plugin loop only."""

    def __init__(
        self,
        read_balance: BalanceRead,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_accounts: int = MAX_ACCOUNTS,
    ) -> None:
        self._read_balance = read_balance
        self._clock = clock
        self._max_accounts = max_accounts
        self._accounts: OrderedDict[tuple[str, str], _Account] = OrderedDict()
        self._loading: dict[tuple[str, str], asyncio.Future[None]] = {}
        self.reads = 0

    def known(self, plan_id: str, payer: str) -> tuple[int, int] | None:
        """``(balance, in_flight)`` as the book sees it, ``None`` for a payer never read."""
        account = self._accounts.get((plan_id, payer.lower()))
        if account is None:
            return None
        return account.balance, account.in_flight

    async def admit(
        self, plan_id: str, payer: str, amount: int, verified_balance: int | None = None
    ) -> Admission | Refusal:
        """Claim ``amount`` credits for one verified request, or say why not.

        ``verified_balance`` is the balance verify reported (``None``: not reported). When the
        known balance falls short with nothing in flight for the payer, verify decides: it
        passed although the payer held too few credits (or did not say how many), so the
        payer's delegation will top up at settle: admitted, one request at a time. When verify
        saw enough credits, one of the two figures is old: the balance is read again, unless
        it was read during this very call. Service errors of a balance read propagate (the
        caller answers 503, nothing charged)."""
        key = (plan_id, payer.lower())
        account = self._account(key)
        reads = self.reads
        if not account.loaded or (
            account.in_flight == 0
            and (account.read_at is None or self._clock() - account.read_at >= BALANCE_TTL_SECS)
        ):
            await self._load(key, account)
        # (account.available, read as its two fields: a property call costs on every request)
        if account.balance - account.in_flight < amount and account.in_flight == 0:
            if verified_balance is None or verified_balance < amount:
                account.in_flight += amount  # top-up: verify is authoritative for this one
                return Admission(key[0], key[1], amount)
            if self.reads == reads:
                await self._load(key, account)
        if account.balance - account.in_flight < amount:
            return Refusal(account.available, amount)
        account.in_flight += amount
        return Admission(key[0], key[1], amount)

    async def restore(
        self, plan_id: str, payer: str, amount: int, request_id: str = ""
    ) -> Admission:
        """Count an owed (queued) settle as in flight, unconditionally: the balance read on
        the next admission still holds those credits, and they are not for sale."""
        key = (plan_id, payer.lower())
        self._account(key).in_flight += amount
        return Admission(key[0], key[1], amount)

    async def settled(self, admission: Admission, redeemed: int, remaining: int | None) -> None:
        """The service burned ``redeemed`` and says ``remaining`` is left."""
        account = self._close(admission)
        account.balance -= redeemed
        account.burned += redeemed
        if remaining is not None and remaining < account.available:
            # lower than any order of our own settles explains: credits were spent elsewhere.
            # Assume every settle still in flight is already inside ``remaining``.
            account.balance = remaining + account.in_flight
        elif remaining is not None and remaining > account.balance and account.in_flight == 0:
            # more than we knew: a top-up or a purchase (or receipts that crossed): the next
            # admission reads the balance instead of trusting either figure
            account.read_at = None

    async def release(self, admission: Admission) -> None:
        """Nothing was burned (the work failed, or the settle is deferred to the queue)."""
        self._close(admission)

    async def refused(self, admission: Admission) -> None:
        """The service refused to burn for want of credits: nothing is available until what is
        in flight is done, then the balance is read again."""
        account = self._close(admission)
        account.balance = account.in_flight
        account.read_at = None

    async def aclose(self) -> None:
        return None

    def _close(self, admission: Admission) -> _Account:
        account = self._account((admission.plan_id, admission.payer))
        account.in_flight = max(account.in_flight - admission.amount, 0)
        return account

    def _account(self, key: tuple[str, str]) -> _Account:
        account = self._accounts.get(key)
        if account is None:
            account = self._accounts[key] = _Account()
            self._evict(keep=key)
        else:
            self._accounts.move_to_end(key)
        return account

    def _evict(self, keep: tuple[str, str]) -> None:
        if len(self._accounts) <= self._max_accounts:
            return
        for key, account in list(self._accounts.items()):
            if account.in_flight == 0 and key != keep and key not in self._loading:
                del self._accounts[key]
                if len(self._accounts) <= self._max_accounts:
                    return

    async def _load(self, key: tuple[str, str], account: _Account) -> None:
        """Read the balance; concurrent callers for one payer share one read."""

        async def read() -> None:
            self.reads += 1
            burned = account.burned
            balance = await self._read_balance(*key)
            # credits in flight were admitted against the old figure and are not burned yet;
            # a settle that closed during the read may or may not be inside the figure:
            # assume it is not (an underestimate refuses a request, never overdraws)
            account.balance = balance - (account.burned - burned)
            account.loaded = True
            account.read_at = self._clock()

        await read_once(self._loading, key, read)
