"""Test helpers shared by several test modules (not fixtures: plain functions)."""

from __future__ import annotations

import base64
import json
import secrets


def fake_key(env: str = "local", address: str | None = None, **claims: object) -> str:
    """A syntactically valid API key (its signature is not checked client-side)."""
    address = address or "0x" + secrets.token_hex(20)

    def seg(data: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()

    payload = {"iss": address, "sub": address, "jti": secrets.token_hex(8), **claims}
    return f"{env}:{seg({'alg': 'HS256', 'typ': 'JWT'})}.{seg(payload)}.c2lnbmF0dXJl"
