"""Exit codes and what ``svc`` prints on stderr when a run fails (never a traceback).

0: success. 1: the service refused (or could not be reached): its error code and message on
stderr, stdout empty. 2: bad usage, refused locally before anything was sent, naming the flag.
What is printed is masked as the plugin's logs are (a service message may quote a key).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from .output import echo

if TYPE_CHECKING:
    from ..service.errors import ServiceError

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

#: ServiceError codes the client raises itself, before any request is sent.
LOCAL_CODES = frozenset({"not_logged_in", "key_expired"})


class BadUsage(click.UsageError):
    """Refused locally (exit 2): the message says what to change; nothing was sent."""


class Refused(click.ClickException):
    """The service's answer says no (exit 1), e.g. ``isValid: false`` from verify."""

    exit_code = EXIT_REFUSED

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code

    def show(self, file: object = None) -> None:
        report_refusal(self.code or "refused", self.message, None)


def report_refusal(code: str, message: str, hint: str | None) -> None:
    """``Error: <code>: <message>`` (and the hint) on stderr, the one place a failure is told."""
    echo(f"Error: {code}: {message}", err=True)
    if hint:
        echo(f"Hint: {hint}", err=True)


def report_service_error(error: ServiceError) -> int:
    """Print a service failure; its exit code (2 when the client refused before sending)."""
    status = f" (HTTP {error.status})" if error.status is not None else ""
    echo(f"Error: {error.code}{status}: {error.message}", err=True)
    if error.code == "not_logged_in":
        echo(
            "Hint: log in with 'svc login <env>:<API_KEY>' (or 'svc config init --api-key ...'), "
            "choose a profile with --profile, or set SVC_API_KEY.",
            err=True,
        )
    elif error.hint:
        echo(f"Hint: {error.hint}", err=True)
    return EXIT_USAGE if error.code in LOCAL_CODES else EXIT_REFUSED


def report_unexpected(error: BaseException) -> int:
    """A bug or an unforeseen failure: one line naming it, no traceback, exit 1."""
    text = str(error).splitlines()[0][:300] if str(error) else ""
    detail = f": {text}" if text else ""
    echo(f"Error: unexpected {type(error).__name__}{detail}", err=True)
    return EXIT_REFUSED
