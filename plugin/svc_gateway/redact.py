"""Keep API keys and payment tokens out of log lines.

Every plugin logger comes from :func:`get_logger`, which installs :class:`RedactingFilter`.
The filter renders the message, then masks anything shaped like a key, a JWT, a bearer
credential or a key-carrying query parameter. Tracebacks and stack traces attached to the
record (``exc_info``, ``exc_text``, ``stack_info``) are rendered and masked the same way.
Ordinary words are left alone: after ``token:`` or ``api_key=`` only a value that looks like a
credential (long, or with digits or punctuation in it) is masked.
"""

from __future__ import annotations

import logging
import re
from urllib.parse import urlsplit

_PATTERNS = [
    # <env>:<jwt> API keys
    re.compile(r"\b(?:sandbox|live|local|staging)[-_\w]*:eyJ[\w-]*\.[\w-]*\.[\w-]*"),
    # Authorization headers / bearer credentials
    re.compile(r"(?i)(bearer\s+)[^\s'\",]+"),
    # key-carrying query parameters and JSON fields, when the value looks like a credential:
    # 16 characters or more, or shorter with a digit or punctuation in it (not a plain word)
    re.compile(
        r"(?i)((?:svc_api_key|svcApiKey|api_?key|x402AccessToken|accessToken|token|"
        r"payment-signature|signature)[\"']?\s*[=:]\s*[\"']?)"
        r"(?=[^\s&'\",}]*\d|[^\s&'\",}]*[._~+/=:-][^\s&'\",}.]|[^\s&'\",}]{16})"
        r"[^\s&'\",}]+"
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


_FORMATTER = logging.Formatter()


class RedactingFilter(logging.Filter):
    """A logging filter that rewrites the record's message, traceback and stack with secrets
    masked. The traceback is rendered here, once, into ``exc_text`` and ``exc_info`` is dropped,
    so no handler can render the unmasked original."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string is not ours to fix; leave it
            message = None
        if message is not None:
            cleaned = redact(message)
            if cleaned != message or record.args:
                record.msg = cleaned
                record.args = None
        if record.exc_info and record.exc_info[0] is not None:
            try:
                record.exc_text = _FORMATTER.formatException(record.exc_info)
            except Exception:  # an exception whose str() raises: keep only its type
                record.exc_text = f"{record.exc_info[0].__name__} (traceback unavailable)"
            record.exc_info = None
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
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


def describe_state_url(url: str) -> str:
    """``host:port/db`` of a ``stateUrl``, without its user name or password."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return f"unix:{parts.path}"
    host = parts.hostname or "localhost"
    if ":" in host:
        host = f"[{host}]"
    db = parts.path.lstrip("/") or "0"
    return f"{host}:{parts.port or 6379}/{db}"
