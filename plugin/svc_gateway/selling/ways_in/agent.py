"""The agent the paid endpoint sells: its handler, its price, and one prompt sold.

The flow sells any work; the gateway's own agent (``agentHandler``, ``credits_for_request``) is
the endpoint's, and the A2A way in sells the same agent. So the handler, its thread pool and
its pricing live here, with the endpoint, not in the flow: a flow built for routes, MCP tools
or metered tools holds no handler it never uses.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ..flow.flow import PaidFlow
from ..flow.replay import digest
from ..handlers import (
    AgentHandler,
    Answer,
    CreditsFn,
    HandlerError,
    SyncHandlerPool,
    call_maybe_async,
    run_handler,
)
from ..types import PaidRequest

#: the paid endpoint's route name (replay key)
ENDPOINT_ROUTE = "endpoint"


class PromptAgent:
    """An agent answering ``{"prompt"}``: ``handler`` (sync handlers run on :attr:`pool`'s
    threads) and ``credits`` (the host's price function; ``None``: the seller's price)."""

    def __init__(
        self,
        handler: AgentHandler,
        credits: CreditsFn | None = None,
        pool: SyncHandlerPool | None = None,
    ) -> None:
        self.handler = handler
        self.credits = credits
        self.pool = pool if pool is not None else SyncHandlerPool()

    def request(
        self,
        prompt: str,
        token: str | None,
        url: str,
        connected: Callable[[], bool] | None = None,
        *,
        route: str = ENDPOINT_ROUTE,
        **sale: Any,
    ) -> PaidRequest:
        """The request to sell for one well-formed ``{"prompt"}`` body (the way in has checked
        method, size, JSON); ``sale``: more of :class:`PaidRequest` (A2A's description...)."""
        return PaidRequest(
            token=token,
            url=url,
            work=functools.partial(run_handler, self.handler, prompt, self.pool),
            # without a credits function the admission reads the seller's price itself
            credits=None if self.credits is None else functools.partial(self.price, prompt),
            route=route,
            body_digest=digest(prompt),
            connected=connected,
            **sale,
        )

    async def price(self, prompt: str) -> int:
        """The credits one prompt costs, by the host's credits function (given
        ``{"prompt": ...}``)."""
        if self.credits is None:
            raise HandlerError("this agent has no credits function")
        value = await call_maybe_async(self.credits, {"prompt": prompt})
        if isinstance(value, bool) or not isinstance(value, int):
            raise HandlerError("the credits function must return an int")
        return value

    async def serve(
        self,
        flow: PaidFlow,
        prompt: str,
        token: str | None,
        url: str,
        connected: Callable[[], bool] | None = None,
    ) -> Answer:
        """One prompt sold through ``flow``. ``connected`` says whether the client is still
        there to receive the answer; asked just before settling (a client gone is never
        charged for an answer it cannot receive)."""
        return (await flow.handle(self.request(prompt, token, url, connected))).answer
