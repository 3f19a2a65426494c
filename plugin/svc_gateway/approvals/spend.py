"""The gate's ways out: the only module that mints a token, creates the delegation behind it or
places an order, each with the :class:`~.gate.Ticket` that allows it.

``tests/test_layout.py`` fails when any other module of the plugin (the service client that
implements the calls, the sandbox that answers them and ``svc``, the person's own command line,
aside) calls them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .gate import NotApproved, Ticket

if TYPE_CHECKING:
    from ..service.client import ServiceClient
    from ..service.models import FiatCheckout, OrderResult


async def token(
    client: ServiceClient,
    ticket: Ticket,
    *,
    agent_id: str | None = None,
    payment_type: str = "crypto",
    payment_method_id: str | None = None,
    resource_url: str | None = None,
    http_verb: str = "POST",
) -> str:
    """An access token for the ticket's plan (a v3 one bound to ``resource_url`` and
    ``http_verb`` when a URL is given). A ticket the person allowed stands on a delegation of
    its own (its limit, one settle); a ``"model"``-mode one on the gateway's pooled delegation
    with the configured limit."""
    if ticket.done:
        raise NotApproved("a ticket already settled or released mints nothing")
    return await client.get_access_token(
        ticket.plan_id,
        agent_id=agent_id,
        payment_type=payment_type,
        payment_method_id=payment_method_id,
        spending_limit_cents=ticket.limit_cents,
        duration_secs=ticket.duration_secs,
        resource_url=resource_url,
        http_verb=http_verb,
        max_transactions=ticket.max_transactions,
    )


async def order(client: ServiceClient, ticket: Ticket) -> OrderResult:
    """Buy the ticket's plan with crypto (an ``order`` ticket)."""
    _check(ticket, "order")
    return await client.order_plan(ticket.plan_id)


async def fiat_order(client: ServiceClient, ticket: Ticket) -> FiatCheckout:
    """The checkout of the ticket's card plan (a ``card_order`` ticket)."""
    _check(ticket, "card_order")
    return await client.order_fiat_plan(ticket.plan_id)


def _check(ticket: Ticket, kind: str) -> None:
    if ticket.kind != kind or ticket.done:
        raise NotApproved(f"a {ticket.kind} ticket does not place a {kind}")
    ticket.done = True  # an order ticket buys once
