"""One run of a command: its settings, profile, output, and the service calls it makes.

A command asks :meth:`Session.call` for what it needs; the profile is read and the client
built only then, so the helpers that need no service never touch a profile or the network.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

import click

from .errors import BadUsage
from .options import Settings, settings_of
from .output import Output
from .profiles import ProfileBook, Resolved, resolve

if TYPE_CHECKING:  # the HTTP client (aiohttp) is imported only by a run that calls the service
    from .client import CliClient

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")
TIMEOUT_SECS = 60.0


class Session:
    """The run's settings plus lazily resolved profile and client."""

    def __init__(self, settings: Settings, book: ProfileBook | None = None) -> None:
        self.settings = settings
        self.book = book or ProfileBook()
        self._resolved: Resolved | None = None

    def output(self, default: str = "table") -> Output:
        """The printer; ``default`` applies when ``--format`` was not given."""
        return Output(self.settings.format or default)

    @property
    def resolved(self) -> Resolved:
        if self._resolved is None:
            self._resolved = resolve(self.book, self.settings.profile, self.settings.api_version)
        return self._resolved

    def client(self, *, auth: bool) -> CliClient:
        """A client for this run's environment; refused (exit 2) without a needed key."""
        from ..config import DEFAULT_API_VERSION
        from .client import CliClient

        resolved = self.resolved
        base_url = resolved.require_base_url()
        if auth and resolved.key is None:
            raise BadUsage(
                f"No API key for profile '{resolved.profile}' in environment "
                f"'{resolved.environment}': run 'svc --profile {resolved.profile} login "
                f"<env>:<API_KEY>', or set SVC_API_KEY."
            )
        return CliClient(
            base_url,
            resolved.key.secret if resolved.key else None,
            environment=resolved.environment,
            api_version=resolved.api_version or DEFAULT_API_VERSION,
            timeout=TIMEOUT_SECS,
        )

    def call(
        self, operation: Callable[[CliClient], Awaitable[T]], *, auth: bool = True
    ) -> tuple[T, Any]:
        """Run ``operation`` on a fresh client; its result and the service's last answer."""
        client = self.client(auth=auth)

        async def run() -> T:
            try:
                return await operation(client)
            finally:
                await client.aclose()

        from ..service.errors import RequestTimeout, TransportError

        try:
            result = asyncio.run(run())
        except TransportError as error:
            if not isinstance(error, RequestTimeout):  # the service's own words say the rest
                error.hint = unreachable_hint(self.resolved, client.base_url)
            raise
        return result, client.last_answer


def unreachable_hint(resolved: Resolved, base_url: str) -> str:
    """What to do when nothing answers at ``base_url``, in ``svc``'s words (the service's
    client speaks of the chat config's ``baseUrl``)."""
    from ..service.transport import origin

    profile, variable = resolved.profile, f"SVC_{resolved.environment.upper()}_BASE_URL"
    return (
        f"Check that the service at {origin(base_url)} is running. To use another URL: "
        f"'svc --profile {profile} config set base-url <URL>' (it ends in /api/v1), or set "
        f"{variable}. For a local sandbox: start 'svc-gateway sandbox', then run "
        "'svc config init --from-sandbox <its URL>'. Then retry."
    )


def pass_session(function: Callable[Concatenate[Session, P], R]) -> Callable[P, R]:
    """Call the command with the run's :class:`Session` first."""

    @functools.wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        session = Session(settings_of(click.get_current_context()))
        return function(session, *args, **kwargs)

    return wrapper
