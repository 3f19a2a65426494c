"""Test helpers shared by several test modules (not fixtures: plain functions)."""

from __future__ import annotations

import base64
import json
import re
import secrets
from typing import Any


def fake_key(env: str = "local", address: str | None = None, **claims: object) -> str:
    """A syntactically valid API key (its signature is not checked client-side)."""
    address = address or "0x" + secrets.token_hex(20)

    def seg(data: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()

    payload = {"iss": address, "sub": address, "jti": secrets.token_hex(8), **claims}
    return f"{env}:{seg({'alg': 'HS256', 'typ': 'JWT'})}.{seg(payload)}.c2lnbmF0dXJl"


#: the line the plugin ends what-a-code-buys with: the code and its confirmation word
CONFIRM_LINE = re.compile(r"To pay, type /svc_approve (?P<code>[A-Z0-9]+) (?P<word>[A-Z0-9]+) ;")


def confirmation(shown: str) -> str | None:
    """``CODE WORD`` from the plugin's answer to ``/svc_approve CODE``, else ``None``."""
    found = CONFIRM_LINE.search(shown)
    return None if found is None else f"{found['code']} {found['word']}"


async def approve(gw: Any, code: str, *, sender: str | None = None, **kwargs: Any) -> str:
    """The person approves ``code`` as the plugin asks: ``/svc_approve CODE`` shows what it
    buys, then ``/svc_approve CODE WORD`` with the word shown confirms it. Returns the last
    answer (the first one when it showed nothing to confirm)."""
    shown = await gw.run_command("svc_approve", code, sender=sender, **kwargs)
    confirm = confirmation(shown)
    if confirm is None:
        return str(shown)
    return str(await gw.run_command("svc_approve", confirm, sender=sender, **kwargs))
