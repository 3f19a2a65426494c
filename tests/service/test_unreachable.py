"""Issue 44: an unreachable service is named, with what to do, in the tool's answer, and the
balance context of a logged-in user says the balance is unavailable, never "log in"."""

from __future__ import annotations

import socket

from tests.conftest import HostFactory


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed when the block ends: nothing listens


async def test_an_unreachable_service_is_named_with_the_fix(
    make_host: HostFactory, subscriber: dict[str, str]
) -> None:
    base = f"http://127.0.0.1:{closed_port()}"
    gateway, _handle = await make_host(
        svcApiKey=subscriber["apiKey"], baseUrl=f"{base}/api/v1", planId="7"
    )
    result = await gateway.call_tool("svc_checkBalance", {"planId": "7"})
    error = result.structuredContent["error"]
    assert error["code"] == "network_error"
    assert f"Could not reach the service at {base} (connection refused" in error["message"]
    assert "svc-gateway sandbox" in error["hint"] and base in error["hint"]
    # the first prompt may go out before the read fails (its budget is short); once it has
    # failed, every prompt says what failed, never "log in"
    texts: list[str] = []
    for _ in range(40):
        texts.append(await gateway.context_text())
        if "balance unavailable" in texts[-1]:
            break
    assert "plan 7: balance unavailable (Could not reach the service" in texts[-1]
    assert not [text for text in texts if "log in" in text.lower()]
