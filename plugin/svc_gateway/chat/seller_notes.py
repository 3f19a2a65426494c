"""What a seller is told next: start-up notes for the paid endpoint, and what to keep in config.

A builder who enables the paid endpoint has one more step (register the agent and its plan), and
after registering, ids and a port that must go into the config to keep selling after a restart.
The words live here so the chat banner, the log and ``svc_registerAgent`` say the same thing.
"""

from __future__ import annotations

from typing import Any, Protocol
from urllib.parse import urlsplit

from ..account.core import PluginCore


class PaidMcp(Protocol):
    """What the banner reads of a running paid MCP server (``selling.ways_in.mcp.PaidMcp``)."""

    url: str

    def logical_uri(self, name: str, kind: str = "tools") -> str: ...

    async def registration_notes(self) -> list[str]: ...


def _port(url: str | None) -> int | None:
    if not url:
        return None
    try:
        return urlsplit(url).port
    except ValueError:
        return None


def serves_itself(core: PluginCore) -> bool:
    """The plugin runs the endpoint's server itself (not mounted on the host's app)."""
    return core.config.enable_paid_endpoint and core.paid_endpoint_bound_url is not None


def startup_notes(core: PluginCore) -> list[str]:
    """Lines for the start-up banner/log: the next step, or why the URL will not last."""
    config = core.config
    if not config.enable_paid_endpoint:
        return []
    url = core.paid_endpoint_url or config.agent_endpoint_path
    notes = []
    selling = core.plan_id or config.plan_id or config.plans
    if not selling:
        notes.append(f"Paid endpoint: not selling yet: run svc_registerAgent with agentUrl {url}")
    elif serves_itself(core) and config.paid_endpoint_port == 0:
        port = _port(core.paid_endpoint_bound_url)
        notes.append(
            "Paid endpoint: paidEndpointPort is 0, so its URL changes on every restart and the "
            f"registered agent's URL stops working: set paidEndpointPort to {port} (the port it "
            "has now) to keep it"
        )
    return notes


def mcp_notes(core: PluginCore, url: str, uri: str) -> list[str]:
    """Lines for the start-up banner/log of ``enablePaidMcp``: where the MCP server is, and the
    logical URI ``uri`` the agent must register (a buyer's token names it, not the URL)."""
    config = core.config
    notes = [f"Paid MCP:      {url} (streamable HTTP, paid tool ask)"]
    if core.plan_id or config.plan_id or config.plans:
        notes.append(f"Paid MCP: the agent sold must register {uri} among its endpoints")
    else:
        notes.append(f"Paid MCP: not selling yet: run svc_registerAgent with agentUrl {uri}")
    return notes


async def mcp_banner(core: PluginCore, paid_mcp: PaidMcp) -> list[str]:
    """The chat banner's lines for ``enablePaidMcp``: where it listens, then, when it sells a
    known agent, what that agent's registration (read from the service) lets buyers pay, so
    the banner never asks to register what is registered."""
    first, *rest = mcp_notes(core, paid_mcp.url, paid_mcp.logical_uri("ask"))
    if core.agent_id is None or not (core.plan_id or core.config.plan_id or core.config.plans):
        return [first, *rest]
    return [first, *await paid_mcp.registration_notes()]


def a2a_notes(core: PluginCore, card_url: str) -> list[str]:
    """Lines for the start-up banner/log of ``enablePaidA2A``: where the A2A agent and its card
    are, and that the card's interface URLs must be the sold agent's registered endpoints (a
    buyer pays only a URL the service lists for the agent; a v3 token is bound to it)."""
    urls = core.paid_a2a_urls
    if not urls:
        return []
    config = core.config
    listed = " and ".join(urls)
    notes = [f"Paid A2A:      {urls[0]} (JSON-RPC; all interfaces: {listed}); card {card_url}"]
    if core.plan_id or config.plan_id or config.plans:
        notes.append(
            f"Paid A2A: the agent sold must register its card's interface URLs {listed} among "
            "its endpoints (svc_registerAgent registers them)"
        )
    else:
        notes.append(
            "Paid A2A: not selling yet: run svc_registerAgent; it registers the card's interface "
            f"URLs {listed} as the agent's endpoints, beside agentUrl"
        )
    return notes


def registered_endpoints(core: PluginCore, agent_url: str) -> list[str]:
    """What ``svc_registerAgent`` registers as the agent's endpoints: ``agentUrl``, and the A2A
    card's interface URLs when this gateway sells over A2A (the same agent, another way in)."""
    return list(dict.fromkeys([agent_url, *core.paid_a2a_urls]))


def a2a_registered(core: PluginCore, endpoints: list[str]) -> dict[str, Any]:
    """The result fields of ``svc_registerAgent`` that say the A2A interfaces were registered."""
    if not core.paid_a2a_urls:
        return {}
    return {
        "endpoints": endpoints,
        "a2a": (
            "This gateway also sells its agent over A2A: the interface URLs of its agent card "
            f"({', '.join(core.paid_a2a_urls)}) were registered as the agent's endpoints too, "
            "since A2A buyers pay only URLs the service lists for the agent."
        ),
    }


def keep_selling(core: PluginCore, plan_id: str | None, agent_id: str | None) -> dict[str, Any]:
    """The result fields of ``svc_registerAgent``: what to put in the config, and a warning."""
    keep: dict[str, Any] = {"planId": plan_id, "agentId": agent_id}  # the service gave both
    port = _port(core.paid_endpoint_bound_url) if serves_itself(core) else None
    if port is not None:
        keep["paidEndpointPort"] = port
    listed = ", ".join(f"{key} {value}" for key, value in keep.items())
    fields: dict[str, Any] = {
        "keepInConfig": keep,
        "message": (
            "Registered; these ids are this gateway's default agentId and planId until it "
            f"restarts. To keep selling after a restart, put {listed} in the plugin config."
        ),
    }
    if port is not None and core.config.paid_endpoint_port == 0:
        fields["warning"] = (
            f"paidEndpointPort is 0: the endpoint's URL changes when the gateway restarts and "
            f"the registered agentUrl would stop working; set paidEndpointPort to {port}."
        )
    return fields
