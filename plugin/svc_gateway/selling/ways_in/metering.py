"""Metered host tools: the host's own tool calls sold per call through the one paid flow.

Config ``meteredTools`` maps a tool name or glob to credits per call (an int) or to
``"module:function"`` (``(tool_name, arguments) -> credits``, sync or async). For each call of a
matching tool the calling chat user's account mints an x402 token for ``meteringPlanId`` (default
``planId``); :meth:`PaidFlow.handle` then admits (the paid endpoint's admission control: N
parallel calls with credits for M run exactly M), verifies, runs the tool, and settles it with
the operator's key on the verify's ``agentRequestId``. A tool that fails is not charged; a
failure comes only from the host's error channel (the tool raised, an error ``ToolResult``, a
result the host adapter marks :class:`HostToolError`), never from parsing what the tool returned:
its output may be the user's own text. A failed call gives the model its failure (the error's
type or code and short message, nothing was charged), never its output: a program that prints
the answer and exits 1 would otherwise answer for free. A payer who is short gets a block result
(price, balance, how to buy) and the tool does not run; a settle outage is queued like the
endpoint's. The svc tools are never metered. A call id seen before is answered from its first
run: the same call is never run or charged twice.

The host's tools are the operator's, not the paid endpoint's agent: tokens are minted for no
agent and the envelope names none, so metering works the same with and without ``agentId``
configured. A payment refused is "insufficient credits" only when the balance says so (the
payer's balance below the price, or its credits held by their calls in progress); any other
refusal is reported as what it is, with the balance.
"""

from __future__ import annotations

import asyncio
import fnmatch
import inspect
import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ...account.receipts import ReceiptBook
from ...approvals import spend
from ...approvals.gate import ApprovalNeeded, Ticket
from ...host import Caller, CallNext, ToolCallContext
from ...redact import get_logger
from ...service import errors
from ...service.models import SCHEME_CARD
from ..handlers import Answer, load_handler
from ..state.settle_journal import SettleJournal
from ..types import Outcome, PaidRequest
from .metered_approval import approval_block, metered_ticket
from .metered_results import (
    balance,
    record_call,
    record_top_up,
    short_block,
    top_up_notice,
    who,
    with_notice,
)
from .tool_results import (
    FailedFn,
    ToolFailed,
    block,
    default_failed,
    delivered,
    failed_result,
)

if TYPE_CHECKING:
    from ...account.core import PluginCore
    from ..flow.flow import PaidFlow

log = get_logger("svc_gateway.metering")


class Accounts(Protocol):
    """Whose account a call runs on (the chat plugin's per-user accounts)."""

    def core_for(self, caller: Caller | None) -> PluginCore: ...


#: the resource URL of a metered call: ``tool://<tool name>``
TOOL_URL = "tool://{name}"
#: call ids remembered, so a host's retry of the same call is answered without a second charge
CALLS_KEPT = 4096
TOOL_QUEUE_FILE = "settle-queue-tools.json"
#: ``PaidRequest.agent_id`` of a metered call: no agent (tokens are minted for none)
NO_AGENT = ""


@dataclass
class _Call:
    """One metered call's tool result (or the exception it raised)."""

    result: Any = None
    ran: bool = False
    finished: bool = False  # the tool returned or raised (not cut off by the deadline)


class ToolMeter:
    """The ``around_tool_call`` handler: meters the host's tools named in ``meteredTools``."""

    def __init__(
        self,
        operator: PluginCore,
        flow: PaidFlow,
        accounts: Accounts | None = None,
        receipts: ReceiptBook | None = None,
        failed: FailedFn = default_failed,
    ) -> None:
        self.operator = operator
        self.flow = flow
        self.accounts = accounts
        self.receipts = receipts if receipts is not None else ReceiptBook()
        self.failed = failed
        self.prices: dict[str, int | Callable[..., Any]] = {}
        for pattern, price in operator.config.metered_tools.items():
            self.prices[pattern] = price if isinstance(price, int) else load_handler(price)
        self._calls: OrderedDict[str, asyncio.Future[Any]] = OrderedDict()
        self._started = False
        self._starting = asyncio.Lock()
        flow.settler.queued_listeners.append(self.receipts.queued_ended)

    @classmethod
    def create(
        cls,
        operator: PluginCore,
        accounts: Accounts | None = None,
        receipts: ReceiptBook | None = None,
    ) -> ToolMeter:
        """A meter with its own paid flow and settle queue (beside the endpoint's)."""
        from ..flow.flow import PaidFlow

        flow = PaidFlow(operator, runtime=operator.runtime)
        return cls(operator, flow, accounts, receipts)

    def queue_path(self) -> Path:
        """The metered calls' own settle journal (one store per file): beside the endpoint's
        ``settleQueuePath`` when set, else beside the credentials."""
        configured = self.operator.config.settle_queue_path
        if configured:
            base = Path(configured).expanduser()
            return base.with_name(f"{base.stem}.tools{base.suffix or '.json'}")
        return self.operator.store.path.parent / TOOL_QUEUE_FILE

    # -- which calls are metered -------------------------------------------------------------

    def price_of(self, tool_name: str) -> int | Callable[..., Any] | None:
        """The configured price of a tool (exact name first, then the first matching glob)."""
        if tool_name.startswith("svc_"):
            return None  # the plugin's own tools are never metered
        if tool_name in self.prices:
            return self.prices[tool_name]
        for pattern, price in self.prices.items():
            if fnmatch.fnmatchcase(tool_name, pattern):
                return price
        return None

    def unoffered(self, offered: Iterable[str]) -> list[str]:
        """The ``meteredTools`` entries that name none of the host's ``offered`` tools."""
        names = [name for name in offered if not name.startswith("svc_")]
        return [
            pattern
            for pattern in self.prices
            if not any(fnmatch.fnmatchcase(name, pattern) for name in names)
        ]

    def warn_unoffered(self, offered: Iterable[str]) -> list[str]:
        """Warn (once per call) about each ``meteredTools`` entry no host tool matches: a typo
        there is never charged. Every host calls it once it knows its tools."""
        names = sorted({str(name) for name in offered})
        missing = self.unoffered(names)
        for pattern in missing:
            log.warning(
                "meteredTools names %r, but no tool this host offers matches it (the host's "
                "tools: %s): it will never be charged",
                pattern,
                ", ".join(name for name in names if not name.startswith("svc_")) or "none",
            )
        return missing

    def plan_id(self) -> str | None:
        config = self.operator.config
        return config.metering_plan_id or config.plan_id or self.operator.plan_id

    # -- the host contract -------------------------------------------------------------------

    async def __call__(self, ctx: ToolCallContext, call_next: CallNext) -> Any:
        """``around_tool_call``: runs on the host's loop; the flow runs on the plugin loop."""
        if self.price_of(ctx.tool_name) is None:
            return await call_next()
        host_loop = asyncio.get_running_loop()
        runtime = self.operator.runtime

        async def run_tool() -> Any:
            if runtime.on_plugin_loop() and host_loop is runtime.loop:
                return await call_next()
            future = asyncio.run_coroutine_threadsafe(_await(call_next), host_loop)
            return await asyncio.wrap_future(future)

        return delivered(await runtime.run(self.meter(ctx, run_tool)))

    # -- one call (plugin loop) --------------------------------------------------------------

    async def meter(self, ctx: ToolCallContext, run_tool: Callable[[], Awaitable[Any]]) -> Any:
        """The tool's result when charged (the host unwraps it with :func:`delivered`), else a
        block or failure :class:`ToolResult` (never raises; never the output of a failed
        call)."""
        key = _call_key(ctx)
        while key and (seen := self._calls.get(key)) is not None:
            log.info("tool call %s was already handled; not run or charged again", ctx.call_id)
            try:
                return await asyncio.shield(seen)
            except asyncio.CancelledError:
                if not seen.cancelled():
                    raise  # this call itself was cancelled
                # the first run was cancelled (nothing charged): this one runs the call
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if key:
            self._calls[key] = future
            while len(self._calls) > CALLS_KEPT:
                self._calls.popitem(last=False)
        call = _Call()
        try:
            result = await self._meter(ctx, run_tool, call)
        except Exception as exc:  # a bug here must block, never run the tool unpaid
            log.exception("metering %s failed", ctx.tool_name)
            result = block(
                "metering_failed",
                f"{ctx.tool_name} could not be metered ({type(exc).__name__}); it did not run",
                "Try again; if it keeps failing, tell the gateway's operator.",
            )
        except BaseException:
            future.cancel()
            self._calls.pop(key, None)
            raise
        future.set_result(result)
        if not call.ran:  # blocked: a retry of this call (after buying credits) runs it
            self._calls.pop(key, None)
        return result

    async def _meter(
        self, ctx: ToolCallContext, run_tool: Callable[[], Awaitable[Any]], call: _Call
    ) -> Any:
        async with self._starting:  # every call waits until the settle journal is open
            if not self._started:
                if self.flow.settler.queue is None:
                    self.flow.settler.queue = await SettleJournal.open(self.queue_path())
                await self.flow.settler.start()
                self._started = True
        name = ctx.tool_name
        plan_id = self.plan_id()
        if plan_id is None:
            return block(
                "metering_not_configured",
                f"{name} is a paid tool, but this gateway names no plan to charge it on",
                "The gateway's operator sets meteringPlanId (or planId) in the plugin config.",
            )
        payer = self.accounts.core_for(ctx.caller) if self.accounts else self.operator
        try:
            credits = await self._price(name, ctx.arguments)
        except Exception as exc:
            log.error("pricing %s failed (%s); not run", name, type(exc).__name__)
            return block(
                "price_unavailable",
                f"{name} could not be priced; it did not run and nothing was charged",
                "Try again; if it keeps failing, tell the gateway's operator.",
            )
        ticket: Ticket | None = None
        try:
            facts = await self.flow.facts(plan_id)
            price = facts.clamp(credits)
            ticket = await metered_ticket(payer, ctx, plan_id, price)
            # a ticket that may buy the plan: the balance before, to tell a top-up afterwards
            before = await balance(payer, plan_id) if ticket.top_up_micro else None
            try:
                token = await self._mint(payer, ticket, facts.scheme)
            except BaseException:
                await ticket.release()  # no token went out
                raise
        except ApprovalNeeded as asked:
            return block(
                "approval_required",
                asked.result["message"],
                asked.pending.line(),
                **approval_block(asked),
            )
        except errors.NotLoggedIn as exc:
            return block("not_logged_in", f"{name} is a paid tool. {exc.message}", exc.hint)
        except errors.ServiceError as exc:
            log.info("no payment for %s: %s", name, exc.code)
            return await short_block(ctx, payer, plan_id, credits, exc.message, ticket)

        async def work() -> Answer:
            call.ran = True
            try:
                call.result = await run_tool()
            except Exception as exc:
                call.result = ToolFailed(exc)
                call.finished = True
                raise
            call.finished = True
            if self.failed(call.result):
                return Answer.json(500, {"error": "the tool failed"})
            return Answer.json(200, {"ok": True})

        request = PaidRequest(
            token=token,
            url=TOOL_URL.format(name=name),
            work=work,
            verb="POST",
            plan_id=plan_id,
            agent_id=NO_AGENT,
            credits=price,
            description=f"tool {name}",
            route=f"tool:{name}",
        )
        try:
            outcome = await self.flow.handle(request)
        except BaseException:
            await ticket.settle(None)  # not known: the reservation counts as spent
            raise
        charged = outcome.kind in (Outcome.PAID, Outcome.DEFERRED)
        await (ticket.settle(price) if charged else ticket.release())
        record_call(self.receipts, ctx, payer, plan_id, price, outcome)
        bought = None
        if charged and before is not None:
            bought = record_top_up(self.receipts, ctx, payer, plan_id, price, before, outcome)
        if outcome.kind in (Outcome.PAID, Outcome.DEFERRED):
            if bought is None:
                return call.result
            # the person sees what the call bought, beside the result the host shows
            return with_notice(call.result, top_up_notice(name, plan_id, price, bought, ticket))
        if outcome.kind is Outcome.WORK_FAILED and call.finished:
            log.info("%s failed; not charged, its output withheld", name)
            return failed_result(name, call.result)  # the failure, never the tool's output
        if outcome.kind is Outcome.WORK_FAILED and call.ran:
            return block(
                "tool_timeout",
                f"{name} did not finish within {self.operator.config.handler_timeout_secs:g} s; "
                "nothing was charged",
                "Try again, perhaps with a smaller request.",
            )
        if outcome.kind is Outcome.REFUSED:
            return await short_block(ctx, payer, plan_id, price, outcome.reason, ticket)
        if outcome.kind is Outcome.WITHHELD:
            return block(
                "payment_refused",
                f"{name} ran, but the payment was refused ({outcome.reason}); its result is "
                "withheld",
                "Check your balance with svc_checkBalance and buy credits, then call again.",
                price=price,
                planId=plan_id,
            )
        return block(
            "metering_unavailable",
            f"{name} is a paid tool and payments cannot be checked right now; it did not run "
            "and nothing was charged",
            "Try again in a minute.",
            price=price,
        )

    async def _price(self, name: str, arguments: dict[str, Any]) -> int:
        price = self.price_of(name)
        if isinstance(price, int):
            return price
        assert price is not None
        value = price(name, dict(arguments))
        if inspect.isawaitable(value):
            value = await value
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError("a metered tool's price function must return a positive int")
        return value

    async def _mint(self, payer: PluginCore, ticket: Ticket, scheme: str) -> str:
        """The call's token, through the spending gate with its ticket."""
        kind = "fiat" if scheme == SCHEME_CARD else "crypto"
        return await spend.token(payer.client(), ticket, payment_type=kind)

    async def aclose(self) -> None:
        await self.flow.aclose()


def _call_key(ctx: ToolCallContext) -> str:
    """The same call: one caller, one tool, one call id, the same arguments (a call id alone
    may repeat across users or turns; a retry of one call never changes them)."""
    if not ctx.call_id:
        return ""
    arguments = json.dumps(ctx.arguments, sort_keys=True, default=repr)
    return "\x00".join((who(ctx.caller) or "", ctx.tool_name, ctx.call_id, arguments))


async def _await(call_next: CallNext) -> Any:
    return await call_next()
