"""The A2A agent card: its interfaces, and the payment extension built from the service's facts.

Served by the SDK at ``/.well-known/agent-card.json`` (and the legacy ``agent.json``), rebuilt
per request (the plan and agent ids can change under svc_registerAgent; the plan's facts are
cached by the flow), so the card never becomes a second source of truth.
"""

from __future__ import annotations

from collections.abc import Callable

from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentExtension,
    AgentInterface,
    AgentSkill,
)

from ....interop import a2a_x402 as x402
from ....service.errors import ServiceError
from ...flow.flow import PaidFlow

#: where the JSON-RPC binding (with the 0.3 compatibility switch on) and HTTP+JSON are served
JSONRPC_PATH = "/a2a"
REST_PATH = "/a2a/rest"
CARD_PATH = "/.well-known/agent-card.json"
LEGACY_CARD_PATH = "/.well-known/agent.json"
#: the A2A version of the JSON-RPC route's compatibility interface (the card's 0.3 fields)
LEGACY_VERSION = "0.3.0"
FALLBACK_NAME = "svc paid agent"
DESCRIPTION = "Answers a prompt, paid per request with the Agent Payments Service (x402 in band)."


def _version() -> str:
    """The installed package's version (the package itself is not imported from here)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("svc-gateway-plugin")
    except PackageNotFoundError:
        return "0"


def interfaces(base: str) -> list[AgentInterface]:
    """The 1.x interfaces, then the JSON-RPC route once more as 0.3 (the SDK's compatibility
    switch serves it): from that interface the SDK writes the card's 0.3 fields (``url``,
    ``preferredTransport``, ``protocolVersion``), so a 0.3 client that follows the card's
    ``url`` reaches JSON-RPC; a 1.x client picks the 1.0 interface of a binding first."""
    base = base.rstrip("/")
    return [
        AgentInterface(url=base + JSONRPC_PATH, protocol_binding="JSONRPC", protocol_version="1.0"),
        AgentInterface(url=base + REST_PATH, protocol_binding="HTTP+JSON", protocol_version="1.0"),
        AgentInterface(
            url=base + JSONRPC_PATH, protocol_binding="JSONRPC", protocol_version=LEGACY_VERSION
        ),
    ]


def skeleton(base: str, name: str = FALLBACK_NAME) -> AgentCard:
    """The card without payment facts (what the request handler checks capabilities on)."""
    return AgentCard(
        name=name,
        description=DESCRIPTION,
        version=_version(),
        supported_interfaces=interfaces(base),
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(
                id="ask",
                name="ask",
                description="Ask the agent a question; paid per message.",
                tags=["paid", "x402"],
            )
        ],
    )


class CardSource:
    """Builds the served card per request from the flow's plan, agent and plan facts."""

    def __init__(self, flow: PaidFlow, base: Callable[[], str]) -> None:
        self.flow = flow
        self.base = base
        self._names: dict[str, str] = {}

    async def card(self, _given: AgentCard | None = None) -> AgentCard:
        return await self.flow.on_its_loop(self._build())

    async def _name(self, agent_id: str | None) -> str:
        if agent_id is None:
            return FALLBACK_NAME
        if agent_id not in self._names:
            try:
                agent = await self.flow.seller.public_client().get_agent(agent_id)
            except ServiceError:
                return FALLBACK_NAME
            if len(self._names) >= 16:
                self._names.clear()
            self._names[agent_id] = agent.name or FALLBACK_NAME
        return self._names[agent_id]

    async def _build(self) -> AgentCard:
        flow = self.flow
        agent_id = flow.agent_id()
        card = skeleton(self.base(), await self._name(agent_id))
        plan_id = flow.plan_id()
        if plan_id is None:
            card.description = DESCRIPTION + " Not selling yet: no plan is configured."
            return card
        facts = await flow.facts(plan_id)  # an outage: the SDK answers 500, nothing cached
        extension = x402.payment_extension(
            agent_id=agent_id,
            plan_ids=[plan_id],
            scheme=facts.scheme,
            network=facts.network,
            credits_per_request=facts.clamp(flow.seller.settings.credits_per_request),
        )
        card.capabilities.extensions.append(AgentExtension(**extension))
        return card
