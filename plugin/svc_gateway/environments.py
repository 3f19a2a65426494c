"""The service environments and the URL an environment variable names for each (no pydantic:
register reads them before a configuration is validated; :mod:`.config` re-exports them)."""

from __future__ import annotations

import os
import re
from urllib.parse import urlsplit

from .api_keys import ConfigError

ENVIRONMENTS: tuple[str, ...] = ("sandbox", "live", "local")
EXAMPLE_BASE_URL = "http://127.0.0.1:8765/api/v1"


def check_base_url(url: str, name: str = "") -> str:
    """The service's REST root without a trailing slash; :class:`ConfigError` with the fix when
    it is not an http(s) URL ending in ``/api/v<N>`` (the root the service's routes hang from:
    without it every call fails later as "No such route"). ``name``: the setting, as its
    owner writes it (``SVC_SANDBOX_BASE_URL``, ``base-url``), put before the URL."""
    value = url.strip().rstrip("/")
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname or " " in value:
        raise ConfigError(f"{name or 'it'} must be an http(s) URL such as {EXAMPLE_BASE_URL}")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    shown = f"{parts.scheme}://{host}{f':{parts.port}' if parts.port else ''}{parts.path}"
    if not re.search(r"/api/v\d+$", parts.path):  # (a user name or password is never shown)
        raise ConfigError(
            f"{name + ' ' if name else ''}{shown} does not end in /api/v1, the service's REST "
            f"root (every call would fail as 'No such route'): set it to {shown}/api/v1"
        )
    return value


def base_url_from_env(environment: str) -> str:
    """``SVC_<ENV>_BASE_URL``: the REST root of a config that sets no ``baseUrl``."""
    name = f"SVC_{environment.upper()}_BASE_URL"
    from_env = os.environ.get(name)
    if from_env:
        return check_base_url(from_env, name)
    raise ConfigError(
        f"No service URL is known for environment '{environment}': set baseUrl in the plugin "
        f"config or SVC_{environment.upper()}_BASE_URL in the environment"
    )
