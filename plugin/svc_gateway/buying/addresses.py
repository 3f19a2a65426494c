"""Where a payment token may go: the agent URL's scheme, and the address its host resolves to."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from ..chat.failure import ToolFailure

if TYPE_CHECKING:
    from ..account.core import PluginCore

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


#: IPv6 forms that carry an IPv4 address in their low 32 bits (RFC 6052, RFC 8215, RFC 6145,
#: RFC 4291's deprecated IPv4-compatible form); 6to4 (RFC 3056) and Teredo (RFC 4380) are read
#: with ``ipaddress``'s own accessors
_LOW32_FORMS = (
    (ipaddress.ip_network("64:ff9b::/96"), "NAT64"),
    (ipaddress.ip_network("64:ff9b:1::/48"), "local-use NAT64"),
    (ipaddress.ip_network("::ffff:0:0:0/96"), "IPv4-translated"),
    (ipaddress.ip_network("::/96"), "IPv4-compatible"),
)


def embedded_ipv4(address: IpAddress) -> list[tuple[ipaddress.IPv4Address, str]]:
    """The IPv4 addresses an IPv6 address carries, each with the name of its form (``::`` and
    ``::1`` carry none; IPv4-mapped addresses are read as IPv4 before this)."""
    if not isinstance(address, ipaddress.IPv6Address):
        return []
    for network, form in _LOW32_FORMS:
        if address in network and int(address) > 1:
            return [(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF), form)]
    if address.sixtofour is not None:
        return [(address.sixtofour, "6to4")]
    if address.teredo is not None:
        server, client = address.teredo
        return [(client, "Teredo client"), (server, "Teredo server")]
    return []


def _public(address: IpAddress) -> bool:
    return address.is_global and not address.is_multicast


def _refusal(host: str, what: str) -> ToolFailure:
    return ToolFailure(
        "private_agent_address",
        f"Refusing to pay an agent at {host}: it resolves to {what}, a private, link-local or "
        "unspecified address; nothing was paid",
        "Agents on this machine (127.0.0.1) and on the public internet are allowed; to pay one "
        "on a private network, the operator adds its host or range to allowedAgentHosts in the "
        "plugin config.",
    )


async def check_agent_address(core: PluginCore, url: str) -> None:
    """Refuse an agent whose host resolves to a private, link-local, unspecified or otherwise
    non-public address, or to an IPv6 form carrying such an IPv4 address (NAT64, 6to4, Teredo,
    IPv4-translated or -compatible); loopback and ``allowedAgentHosts`` are allowed."""
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
            address = address.ipv4_mapped  # the same socket as the IPv4 address: loopback too
        if address.is_loopback or _allowed(address, host, allow):
            continue
        inner = embedded_ipv4(address)
        for ipv4, form in inner:
            if not _allowed(ipv4, host, allow) and not _public(ipv4):
                raise _refusal(host, f"{address}, which carries the IPv4 address {ipv4} ({form})")
        if inner and all(_allowed(ipv4, host, allow) for ipv4, _ in inner):
            continue
        if not _public(address):  # the wrapper counts too: Teredo is not globally reachable
            raise _refusal(host, str(address))
