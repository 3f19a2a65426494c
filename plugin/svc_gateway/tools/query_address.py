"""Where a payment token may go: the agent URL's scheme, and the address its host resolves to."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from .base import ToolFailure

if TYPE_CHECKING:
    from ..core import PluginCore

_LOOPBACK_NAMES = ("localhost", "localhost.")
DEFAULT_PORTS = {"http": 80, "https": 443}

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[list[str]]]


def is_loopback_host(host: str | None) -> bool:
    """127.0.0.0/8, ::1 and localhost: traffic that never leaves this machine."""
    if not host:
        return False
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_agent_url(url: str) -> None:
    """Refuse plain HTTP to a remote host (the token is a bearer credential) and URLs that
    carry a password or cannot be parsed."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise ToolFailure(
            "invalid_params", "agentUrl is not a valid URL", "Pass the agent's full https:// URL."
        ) from None
    if parts.username is not None or parts.password is not None:
        raise ToolFailure(
            "invalid_params",
            "agentUrl carries a user name or password",
            "Pass the agent's URL without credentials in it.",
        )
    if parts.scheme == "https" and parts.hostname:
        return
    if parts.scheme == "http" and is_loopback_host(parts.hostname):
        return
    raise ToolFailure(
        "insecure_agent_url",
        f"Refusing to send a payment token to {parts.scheme}://{parts.hostname or '?'}: plain "
        "HTTP would expose it (a bearer credential) to anyone on the network",
        "Use the agent's https:// URL (plain http is allowed only for 127.0.0.1/localhost).",
    )


async def resolve_host(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (an IP literal resolves to itself)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


#: the resolver svc_queryAgent uses; a test may swap it to make a name resolve elsewhere
resolver: Resolver = resolve_host


def _allowed(address: IpAddress, host: str, allow: list[str]) -> bool:
    for entry in allow:
        if entry == host.lower().rstrip("."):
            return True
        try:
            if address in ipaddress.ip_network(entry, strict=False):
                return True
        except ValueError:
            continue
    return False


async def check_agent_address(core: PluginCore, url: str) -> None:
    """Refuse an agent whose host resolves to a private, link-local, unspecified or otherwise
    non-public address; loopback and ``allowedAgentHosts`` are allowed."""
    parts = urlsplit(url)
    host = (parts.hostname or "").strip("[]")
    port = parts.port or DEFAULT_PORTS.get(parts.scheme, 443)
    try:
        addresses = await resolver(host, port)
    except (OSError, UnicodeError):
        raise ToolFailure(
            "agent_unreachable",
            f"Could not resolve the agent's host {host}; nothing was paid",
            "Check the host name in agentUrl.",
        ) from None
    allow = core.config.allowed_agent_hosts
    for text in addresses or ["0.0.0.0"]:
        try:
            address: IpAddress = ipaddress.ip_address(text)  # a scope id (%eth0) is kept
        except ValueError:
            address = ipaddress.ip_address("0.0.0.0")  # unreadable: refused below
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        if address.is_loopback or _allowed(address, host, allow):
            continue
        if not address.is_global or address.is_multicast:
            raise ToolFailure(
                "private_agent_address",
                f"Refusing to pay an agent at {host}: it resolves to {address}, a private, "
                "link-local or unspecified address; nothing was paid",
                "Agents on this machine (127.0.0.1) and on the public internet are allowed; to "
                "pay one on a private network, the operator adds its host or range to "
                "allowedAgentHosts in the plugin config.",
            )
