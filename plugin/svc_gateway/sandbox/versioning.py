"""API versioning exactly as SPEC.md "Versioning" states it.

The effective version of a request comes from the ``Service-Version`` header, else the
version pinned on the API key, else the floor. Both response headers name the outcome.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ..api_keys import normalize_version
from .errors import VERSION_UNSUPPORTED, ApiError

KNOWN_VERSIONS: tuple[str, ...] = ("1.0", "1.1")
CURRENT = "1.1"
FLOOR = "1.0"
#: Versions that changed a wire shape. The sandbox serves 1.0 and 1.1 with the same shapes:
#: SPEC.md does not say what 1.1 changed, so inventing a difference would mislead clients.
GATED_VERSIONS: tuple[str, ...] = ("1.1",)

VERSION_HEADER = "Service-Version"
RESOLVED_HEADER = "Service-Version-Resolved-From"

Source = Literal["header", "apiKey", "fallback"]


@dataclass(frozen=True)
class Resolution:
    """The version a request is answered in and where that choice came from."""

    version: str
    source: Source


def known_version(raw: str) -> str | None:
    """``v1.1`` / ``1.1.7`` → ``1.1`` when this service serves it, else ``None``."""
    normalized = normalize_version(raw)
    return normalized if normalized in KNOWN_VERSIONS else None


def version_error(raw: str) -> ApiError:
    """400 ``BCK.VERSION.0001`` naming the rejected value and the supported range."""
    shown = raw if len(raw) <= 40 else raw[:40] + "…"
    return ApiError(
        400,
        VERSION_UNSUPPORTED,
        f"Service-Version {shown!r} is not supported: this service serves versions "
        f"{FLOOR} to {CURRENT} ({', '.join(KNOWN_VERSIONS)})",
        f"Send MAJOR.MINOR (for example {CURRENT}; v{CURRENT} and {CURRENT}.0 also work) "
        "or omit the header to use the version pinned on your API key",
    )


def resolve(header: str | None, pinned: str | None) -> tuple[Resolution, ApiError | None]:
    """Resolve a request's version; a bad header yields the fallback plus the 400 to raise.

    The fallback resolution is still returned with an error so that the 400 itself carries
    the two response headers.
    """
    if header is not None:
        version = known_version(header)
        if version is not None:
            return Resolution(version, "header"), None
    without_header = Resolution(pinned, "apiKey") if pinned else Resolution(FLOOR, "fallback")
    if header is not None:
        return without_header, version_error(header)
    return without_header, None


def discovery(resolution: Resolution, pinned: str) -> dict[str, Any]:
    """The ``GET /meta/versions`` answer (always in the latest schema)."""
    return {
        "current": CURRENT,
        "floor": FLOOR,
        "gatedVersions": list(GATED_VERSIONS),
        "yourPinnedVersion": pinned,
        "yourEffectiveVersion": resolution.version,
        "yourVersionResolvedFrom": resolution.source,
    }
