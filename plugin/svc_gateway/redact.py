"""Keep API keys and payment tokens out of log lines.

Every plugin logger comes from :func:`get_logger`, which installs :class:`RedactingFilter`.
The filter renders the message, then masks anything shaped like a key, a JWT, a bearer
credential or a key-carrying query parameter.
"""

from __future__ import annotations

import logging
import re

_PATTERNS = [
    # <env>:<jwt> API keys
    re.compile(r"\b(?:sandbox|live|local|staging)[-_\w]*:eyJ[\w-]*\.[\w-]*\.[\w-]*"),
    # Authorization headers / bearer credentials
    re.compile(r"(?i)(bearer\s+)[^\s'\",]+"),
    # key-carrying query parameters and JSON fields
    re.compile(
        r"(?i)((?:svc_api_key|svcApiKey|api_?key|x402AccessToken|accessToken|token|"
        r"payment-signature)[\"']?\s*[=:]\s*[\"']?)[^\s&'\",}]+"
    ),
    # bare JWTs and base64url JSON tokens (both start with eyJ)
    re.compile(r"eyJ[\w-]{8,}(?:\.[\w-]*){0,2}"),
]
MASK = "[REDACTED]"


def redact(text: str) -> str:
    """Mask secrets in ``text``."""
    for pattern in _PATTERNS:
        if pattern.groups:
            text = pattern.sub(lambda m: m.group(1) + MASK, text)
        else:
            text = pattern.sub(MASK, text)
    return text


class RedactingFilter(logging.Filter):
    """A logging filter that rewrites the record's message with secrets masked."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string is not ours to fix; leave it
            return True
        cleaned = redact(message)
        if cleaned != message or record.args:
            record.msg = cleaned
            record.args = None
        return True


_FILTER = RedactingFilter()


def get_logger(name: str) -> logging.Logger:
    """A logger with the redacting filter installed (idempotent)."""
    logger = logging.getLogger(name)
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
    return logger


def install(*names: str) -> None:
    """Install the filter on other loggers that might see a URL or header (e.g. httpx).

    A logger's filters do not apply to its children's records, so existing children
    (``httpcore.http11``...) get the filter too.
    """
    for name in names:
        get_logger(name)
        for child in list(logging.Logger.manager.loggerDict):
            if child.startswith(name + "."):
                get_logger(child)
