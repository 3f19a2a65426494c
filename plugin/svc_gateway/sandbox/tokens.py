"""HS256 JWT signing for API keys and x402 access tokens, plus random identifiers.

Keys and tokens are real JWTs so clients decode them exactly as they decode hosted ones;
each kind is signed with its own key derived from the sandbox secret, so a valid API key
can never pass as an access token or the other way round.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Any

from ..encoding import b64url_nopad, compact_json, decode_b64_json, jwt_claims

_HEADER = b64url_nopad(compact_json({"alg": "HS256", "typ": "JWT"}).encode())


def derive_key(secret: bytes, purpose: str) -> bytes:
    """A signing key for one purpose, so signatures of one kind never verify as another."""
    return hmac.new(secret, purpose.encode(), hashlib.sha256).digest()


def _signature(signing_input: str, key: bytes) -> str:
    return b64url_nopad(hmac.new(key, signing_input.encode("ascii"), hashlib.sha256).digest())


def sign(claims: dict[str, Any], key: bytes) -> str:
    """``header.payload.signature``, each part base64url without padding."""
    payload = b64url_nopad(compact_json(claims).encode())
    signing_input = f"{_HEADER}.{payload}"
    return f"{signing_input}.{_signature(signing_input, key)}"


def verify(token: object, key: bytes) -> dict[str, Any] | None:
    """The claims of a token this key signed; ``None`` for anything else (never raises)."""
    if not isinstance(token, str) or token.count(".") != 2 or len(token) > 16384:
        return None
    head, payload, signature = token.split(".")
    header = decode_b64_json(head)
    if header is None or header.get("alg") != "HS256":
        return None
    try:
        expected = _signature(f"{head}.{payload}", key)
    except UnicodeEncodeError:
        return None
    if not hmac.compare_digest(signature.encode(), expected.encode()):
        return None
    return jwt_claims(token)


def random_hex(nbytes: int) -> str:
    return secrets.token_hex(nbytes)


def new_address() -> str:
    return "0x" + random_hex(20)


def tx_hash() -> str:
    """A transaction hash shaped like an on-chain one: ``0x`` + 64 hex."""
    return "0x" + random_hex(32)


def fake_signature() -> str:
    """A 65-byte value shaped like an EIP-712 signature."""
    return "0x" + random_hex(65)


def contract_address(seed: str) -> str:
    """A stable address derived from an id (the plan's credits contract)."""
    return "0x" + hashlib.sha256(seed.encode()).hexdigest()[:40]
