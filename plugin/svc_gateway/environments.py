"""The service environments and the URL an environment variable names for each (no pydantic:
register reads them before a configuration is validated; :mod:`.config` re-exports them)."""

from __future__ import annotations

import os

from .api_keys import ConfigError

ENVIRONMENTS: tuple[str, ...] = ("sandbox", "live", "local")


def base_url_from_env(environment: str) -> str:
    """``SVC_<ENV>_BASE_URL``: the REST root of a config that sets no ``baseUrl``."""
    from_env = os.environ.get(f"SVC_{environment.upper()}_BASE_URL")
    if from_env:
        return from_env.rstrip("/")
    raise ConfigError(
        f"No service URL is known for environment '{environment}': set baseUrl in the plugin "
        f"config or SVC_{environment.upper()}_BASE_URL in the environment"
    )
