"""Signing: HS256 JWTs for API keys, and x402 access tokens in the service's own format.

API keys are JWTs (``local:<jwt>``) as the hosted ones are. Access tokens are what the
service issues (WIRE.md §3.2, ``payments_py/x402/token.py``): the base64url, unpadded,
compact JSON of an x402 PaymentPayload. Their ``payload.signature`` is an HMAC-SHA256 over
the canonical JSON of the rest of the document, so altering any field, or forging a token,
fails :func:`open_access_token`. Each kind is signed with its own key derived from the
sandbox secret, so a valid API key can never pass as an access token or the other way round.
"""

from __future__ import annotations

import base64
import binascii
import copy
import hashlib
import hmac
import json
import secrets
from typing import Any

from ..encoding import b64url_nopad, compact_json, decode_b64_json, jwt_claims

MAX_TOKEN_CHARS = 16384

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


def _canonical(document: dict[str, Any]) -> bytes:
    """The signed bytes: the document without ``payload.signature``, keys sorted."""
    unsigned = copy.deepcopy(document)
    payload = unsigned.get("payload")
    if isinstance(payload, dict):
        payload.pop("signature", None)
    return json.dumps(unsigned, sort_keys=True, separators=(",", ":")).encode()


def _mac(document: dict[str, Any], key: bytes) -> str:
    return "0x" + hmac.new(key, _canonical(document), hashlib.sha256).hexdigest()


def seal_access_token(document: dict[str, Any], key: bytes) -> str:
    """Sign ``document`` into ``payload.signature`` and encode it as the service does."""
    sealed = copy.deepcopy(document)
    sealed.setdefault("payload", {})["signature"] = _mac(sealed, key)
    return base64.urlsafe_b64encode(compact_json(sealed).encode()).decode().rstrip("=")


def open_access_token(token: object, key: bytes) -> dict[str, Any] | None:
    """The document of an access token this key sealed; ``None`` otherwise (never raises)."""
    if not isinstance(token, str) or not token or len(token) > MAX_TOKEN_CHARS:
        return None
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        document = json.loads(raw)
    except (binascii.Error, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(document, dict):
        return None
    payload = document.get("payload")
    signature = payload.get("signature") if isinstance(payload, dict) else None
    if not isinstance(signature, str):
        return None
    if not hmac.compare_digest(signature.encode(), _mac(document, key).encode()):
        return None
    return document


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
