"""Paid LangChain tools: ``@requires_payment(payments, plan_id=...)`` under ``@tool``.

The tool takes its payment from the run's ``configurable`` (``payment_token``, as payments-py's
``@requires_payment`` does: a LangGraph run sends it in ``config.configurable``), and each call
goes through the one paid flow: verify (the credits held), the tool, settle. Async all the way
(payments-py's verify and settle are synchronous, fatal under ``langgraph dev``'s blocking-call
detector). Per call:

* the receipt is returned with the result, as the tool's artifact: declare the tool with
  ``@tool(response_format="content_and_artifact")``; the ``ToolMessage``'s ``artifact`` is
  ``{"payment_response": receipt}`` (never a process-wide "last settlement");
* a tool that raises is not charged, and its exception propagates as it was;
* no token, a bad one or too few credits raise :class:`PaymentRequiredError` with the x402
  envelope (nothing ran); an outage raises :class:`PaymentUnavailableError`;
* as on MCP, a tool's result is never delivered unsettled: a settle that cannot complete now
  withholds it (:class:`PaymentRequiredError` when the service refused to burn,
  :class:`PaymentUnavailableError` otherwise) and nothing is charged or queued.

The token is taken out of ``configurable`` before the tool sees its config.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from ....service.seller import Seller
from ...flow.flow import PaidFlow
from ...handlers import Answer
from ...types import Outcome, PaidRequest
from ..routes import RouteConfig

__all__ = ["PaymentRequiredError", "PaymentUnavailableError", "requires_payment"]

T = TypeVar("T")
#: the token's key in the run's ``configurable``
TOKEN_KEY = "payment_token"
#: credits of one call: a number, or a function of ``{"args": the tool's arguments}``
ToolCredits = int | Callable[[Mapping[str, Any]], int]


class PaymentRequiredError(Exception):
    """The call was not paid (no token, a bad one, too few credits): ``payment_required`` is
    the x402 envelope (``accepts``: the plan to buy), ``message`` says why."""

    def __init__(self, message: str, payment_required: dict[str, Any] | None) -> None:
        super().__init__(message)
        self.message = message
        self.payment_required = payment_required


class PaymentUnavailableError(Exception):
    """The payment service could not be reached (or this seller is misconfigured): nothing was
    charged; retry later."""


def requires_payment(
    payments: Seller,
    *,
    plan_id: str,
    credits: ToolCredits = 1,
    agent_id: str | None = None,
    network: str | None = None,
    scheme: str | None = None,
    flow: PaidFlow | None = None,
) -> Callable[[Callable[..., Awaitable[T]]], Callable[..., Awaitable[tuple[T, dict[str, Any]]]]]:
    """Sell each call of an async LangChain tool (put it under ``@tool(response_format=
    "content_and_artifact")``; the function takes ``config: RunnableConfig``). ``flow``: share
    one paid flow between tools (default: one per decorated tool)."""
    checked = RouteConfig(plan_id=plan_id, agent_id=agent_id, network=network, scheme=scheme)

    def decorate(
        fn: Callable[..., Awaitable[T]],
    ) -> Callable[..., Awaitable[tuple[T, dict[str, Any]]]]:
        if not inspect.iscoroutinefunction(fn):
            raise TypeError(
                f"@requires_payment sells async tools only: make {fn.__name__} an async def "
                "(a sync tool would block the event loop with its payment calls)"
            )
        name = fn.__name__
        own: list[PaidFlow] = []

        @functools.wraps(fn)
        async def paid_call(*args: Any, **kwargs: Any) -> tuple[T, dict[str, Any]]:
            config = kwargs.get("config") or {}
            configurable = dict(config.get("configurable") or {})
            token = configurable.pop(TOKEN_KEY, None)
            if "config" in kwargs:
                kwargs["config"] = {**config, "configurable": configurable}
            held: dict[str, Any] = {}

            async def work() -> Answer:
                try:
                    held["result"] = await fn(*args, **kwargs)
                except Exception as exc:
                    held["error"] = exc
                    raise
                return Answer(200, b"{}")

            arguments = {k: v for k, v in kwargs.items() if k != "config"}
            price = credits if isinstance(credits, int) else _price(credits, arguments)
            request = PaidRequest(
                token=token if isinstance(token, str) and token.strip() else None,
                url=f"langchain-tool:{name}",
                work=work,
                plan_id=checked.plan_id,
                agent_id=checked.agent_id or "",
                credits=price,
                scheme=checked.scheme_override,
                network=checked.network,
                description=f"the tool {name}",
                route=f"tool {name}",
                deliver_unsettled=False,
            )
            if flow is not None:
                sold_by = flow
            else:
                if not own:
                    own.append(PaidFlow(payments))
                sold_by = own[0]
            outcome = await sold_by.handle(request)
            if outcome.kind is Outcome.PAID and "result" in held:
                return held["result"], {"payment_response": outcome.receipt}
            if "error" in held:
                raise held["error"]
            why = _reason(outcome.answer)
            if outcome.answer.status == 402:
                envelope = outcome.envelope.x402() if outcome.envelope is not None else None
                raise PaymentRequiredError(f"Payment required: {why}", envelope)
            raise PaymentUnavailableError(f"The tool was not sold ({why}); nothing was charged.")

        return paid_call

    return decorate


def _price(credits: Callable[[Mapping[str, Any]], int], arguments: dict[str, Any]) -> Any:
    async def price() -> int:
        return credits({"args": arguments})

    return price


def _reason(answer: Answer) -> str:
    import json

    try:
        data = json.loads(answer.body)
    except ValueError:
        return f"status {answer.status}"
    if isinstance(data, dict):
        for key in ("reason", "message", "error"):
            if isinstance(data.get(key), str):
                return str(data[key])
    return f"status {answer.status}"
