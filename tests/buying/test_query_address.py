"""Private IPv4 addresses inside IPv6 ones (issue 16 #11): NAT64 (64:ff9b::/96 and the
local-use 64:ff9b:1::/48), 6to4, Teredo, IPv4-mapped, -translated and -compatible forms are
unwrapped and the private-address rule applied to the IPv4 they carry. Python 3.11's
``is_global`` accepts most of these wrappers, so only the unwrapping refuses them."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

import pytest

from svc_gateway.account.core import PluginCore
from svc_gateway.buying import addresses as qd
from svc_gateway.chat.failure import ToolFailure
from svc_gateway.config import PluginConfig

URL = "https://agent.example.com/agent"


def core(allow: list[str] | None = None) -> PluginCore:
    return cast(PluginCore, SimpleNamespace(config=PluginConfig(allowedAgentHosts=allow or [])))


def resolving_to(monkeypatch: pytest.MonkeyPatch, *addresses: str) -> None:
    async def answer(host: str, port: int) -> list[str]:
        return list(addresses)

    monkeypatch.setattr(qd, "resolver", answer)


# 10.0.0.5 in each form; Teredo's client is stored inverted (RFC 4380): ~0a000005 = f5fffffa
PRIVATE_FORMS = [
    ("64:ff9b::a00:5", "10.0.0.5 (NAT64)"),
    ("64:ff9b:1::a00:5", "10.0.0.5 (local-use NAT64)"),
    ("64:ff9b:1:abcd::a9fe:a9fe", "169.254.169.254 (local-use NAT64)"),
    ("2002:a00:5::1", "10.0.0.5 (6to4)"),
    ("2001:0:4136:e378:8000:63bf:f5ff:fffa", "10.0.0.5 (Teredo client)"),
    ("::ffff:0:a00:5", "10.0.0.5 (IPv4-translated)"),
    ("::a00:5", "10.0.0.5 (IPv4-compatible)"),
    ("64:ff9b::7f00:1", "127.0.0.1 (NAT64)"),  # a NAT64 gateway's loopback is not ours
]


@pytest.mark.parametrize(("address", "carried"), PRIVATE_FORMS)
async def test_an_ipv6_form_carrying_a_private_ipv4_is_refused(
    monkeypatch: pytest.MonkeyPatch, address: str, carried: str
) -> None:
    resolving_to(monkeypatch, address)
    with pytest.raises(ToolFailure) as refused:
        await qd.check_agent_address(core(), URL)
    assert refused.value.code == "private_agent_address"
    assert refused.value.message == (
        f"Refusing to pay an agent at agent.example.com: it resolves to {address}, which "
        f"carries the IPv4 address {carried}, a private, link-local or unspecified address; "
        "nothing was paid"
    )


@pytest.mark.parametrize(
    "allow", [["10.0.0.0/8"], ["agent.example.com"], ["64:ff9b:1::/48"], ["10.0.0.5"]]
)
async def test_the_allow_list_opens_an_embedded_private_address(
    monkeypatch: pytest.MonkeyPatch, allow: list[str]
) -> None:
    resolving_to(monkeypatch, "64:ff9b:1::a00:5")
    await qd.check_agent_address(core(allow), URL)  # no refusal
    with pytest.raises(ToolFailure):
        await qd.check_agent_address(core(["10.9.0.0/16"]), URL)


@pytest.mark.parametrize(
    "address", ["64:ff9b::808:808", "2002:808:808::1", "::ffff:8.8.8.8", "2606:4700::1111"]
)
async def test_a_public_ipv4_in_a_wrapper_that_is_public_is_allowed(
    monkeypatch: pytest.MonkeyPatch, address: str
) -> None:
    resolving_to(monkeypatch, address)
    await qd.check_agent_address(core(), URL)


async def test_teredo_is_refused_even_with_public_ends_and_an_ipv4_mapped_loopback_is_local(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # client 8.8.8.8 (~ = f7f7:f7f7), server 65.54.227.120: the 2001::/32 wrapper is not global
    resolving_to(monkeypatch, "2001:0:4136:e378:8000:63bf:f7f7:f7f7")
    with pytest.raises(ToolFailure) as refused:
        await qd.check_agent_address(core(), URL)
    assert "it resolves to 2001:0:4136:e378:8000:63bf:f7f7:f7f7, a private" in (
        refused.value.message
    )
    resolving_to(monkeypatch, "::ffff:127.0.0.1", "::1")
    await qd.check_agent_address(core(), URL)


def test_embedded_ipv4_of_each_form() -> None:
    ip = qd.ipaddress.ip_address
    assert qd.embedded_ipv4(ip("10.0.0.5")) == []
    assert qd.embedded_ipv4(ip("::")) == [] and qd.embedded_ipv4(ip("::1")) == []
    assert qd.embedded_ipv4(ip("2606:4700::1111")) == []
    assert qd.embedded_ipv4(ip("2001:0:4136:e378:8000:63bf:f5ff:fffa")) == [
        (ip("10.0.0.5"), "Teredo client"),
        (ip("65.54.227.120"), "Teredo server"),
    ]
    assert qd.embedded_ipv4(ip("64:ff9b:1:ffff::c0a8:101")) == [
        (ip("192.168.1.1"), "local-use NAT64")
    ]
