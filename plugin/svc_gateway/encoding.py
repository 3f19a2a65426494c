"""Small wire encodings shared by the client, the paid endpoint and the sandbox.

Header payloads are base64 of compact JSON (WIRE.md §5); access tokens are either a JWT or
base64url JSON (WIRE.md §3.2). Decoders never raise: they return ``None`` on garbage.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from json.encoder import encode_basestring_ascii
from typing import Any

ADDRESS_RE = re.compile(r"^0x[a-fA-F0-9]{40}$")
ZERO_ADDRESS = "0x" + "0" * 40


def is_address(value: object) -> bool:
    return isinstance(value, str) and ADDRESS_RE.fullmatch(value) is not None


#: ``json.dumps(..., separators=(",", ":"), ensure_ascii=False)``, its encoder made once
_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def compact_json(data: Any) -> str:
    return _COMPACT(data)


def b64_json(data: Any) -> str:
    """Standard base64 (``+/=``) of compact JSON: the ``payment-*`` header encoding."""
    return base64.b64encode(compact_json(data).encode()).decode("ascii")


def b64url_nopad(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def b64_decode_any(text: str) -> bytes | None:
    """Decode standard or url-safe base64, padded or not."""
    cleaned = text.strip()
    if not cleaned:
        return None
    padded = cleaned + "=" * (-len(cleaned) % 4)
    for decoder in (base64.urlsafe_b64decode, base64.b64decode):
        try:
            return decoder(padded.encode("ascii"))
        except (binascii.Error, ValueError, UnicodeEncodeError):
            continue
    return None


def decode_b64_json(text: str | None) -> dict[str, Any] | None:
    """Decode a ``payment-required`` / ``payment-response`` header; ``None`` if it is not one."""
    if not text:
        return None
    raw = b64_decode_any(text)
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def jwt_claims(token: str) -> dict[str, Any] | None:
    """The payload of a JWT without checking its signature; ``None`` if it is not a JWT."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    return decode_b64_json(parts[1])


def decode_access_token(token: str | None) -> dict[str, Any] | None:
    """Decode an x402 access token in either form (JWT or base64url JSON). Never raises."""
    if not token or not isinstance(token, str):
        return None
    token = token.strip()
    if token.count(".") == 2:
        return jwt_claims(token)
    return decode_b64_json(token)


def token_authorization(decoded: dict[str, Any]) -> dict[str, Any]:
    """The ``authorization`` object, under ``payload`` or at the top level (WIRE.md §3.2)."""
    payload = decoded.get("payload")
    if isinstance(payload, dict) and isinstance(payload.get("authorization"), dict):
        return dict(payload["authorization"])
    auth = decoded.get("authorization")
    return dict(auth) if isinstance(auth, dict) else {}


def to_int(value: object, default: int = 0) -> int:
    """Read a big integer sent as a decimal string or a number."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        if re.fullmatch(r"-?\d+", text):
            return int(text)
    return default


def abbreviate_secret(secret: str | None) -> str:
    """A form of a token or key that is safe to show: its first six characters and length."""
    if not secret:
        return "<none>"
    return f"{secret[:6]}…({len(secret)} chars)"


def big_int(value: Any) -> int:
    """A big integer from a number or a decimal string (WIRE.md §1.4); a bool is refused."""
    if type(value) is str and value.isdecimal() and value.isascii():  # the service's usual form
        return int(value)
    if isinstance(value, bool):
        raise ValueError("expected an integer, got a boolean")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    raise ValueError("expected an integer or a decimal string")


def facilitator_body(
    envelope_json: bytes,
    token: str,
    max_amount: int | None = None,
    agent_request_id: str | None = None,
) -> bytes:
    """The JSON body of ``x402/verify`` and ``x402/settle``, byte for byte what
    ``json.dumps({"paymentRequired": ..., "x402AccessToken": ..., "maxAmount": ...,
    "agentRequestId": ...}, separators=(",", ":"))`` gives, around an envelope serialised once
    (the paid path sends the same envelope twice per request, and many requests share it)."""
    parts = [b'{"paymentRequired":', envelope_json, b',"x402AccessToken":', _json_str(token)]
    if max_amount is not None:
        parts.append(b',"maxAmount":"%d"' % max_amount)
    if agent_request_id:
        parts += (b',"agentRequestId":', _json_str(agent_request_id))
    parts.append(b"}")
    return b"".join(parts)


def _json_str(text: str) -> bytes:
    """``json.dumps(text).encode()`` without ``json.dumps``'s Python layers (its own encoder)."""
    return encode_basestring_ascii(text).encode()
