"""The payment token a query sends: minted for the purchase and URL, and the version it came as."""

from __future__ import annotations

from ..account.core import PluginCore
from ..approvals import spend
from ..approvals.gate import Ticket
from ..chat.failure import ToolFailure
from ..encoding import decode_access_token, token_authorization
from ..service.errors import ServiceError
from .answers import Purchase
from .purchase import HTTP_VERB
from .request import AgentQuery


def token_version(token: str) -> int:
    """3 when the token carries a one-time nonce (WIRE.md §3.1), else 2."""
    nonce = token_authorization(decode_access_token(token) or {}).get("nonce")
    return 3 if isinstance(nonce, str) and nonce.strip() else 2


async def mint(core: PluginCore, p: AgentQuery, purchase: Purchase, ticket: Ticket) -> str:
    """A token for ``purchase`` through the spending gate with its ``ticket``, bound to
    ``agentUrl`` and the POST verb; a URL the service says the agent never registered is
    refused as such (nothing was paid)."""
    try:
        return await spend.token(
            core.client(),
            ticket,
            agent_id=purchase.agent_id,
            payment_type=purchase.payment_type,
            payment_method_id=p.payment_method_id,
            resource_url=p.agent_url,
            http_verb=HTTP_VERB,
        )
    except ServiceError as exc:
        if exc.code == "BCK.PROTOCOL.0031":
            raise ToolFailure(
                "agent_url_not_registered",
                f"The service refused a token for {p.agent_url}: it is not a registered "
                f"endpoint of agent {purchase.agent_id}; nothing was paid",
                "Use the URL the agent registered.",
            ) from None
        raise
