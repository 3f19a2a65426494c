"""The global options (``--profile``, ``--format``, ``--api-version``), accepted before the
group (``svc --format json plans get-plans``) and after the command (``svc plans get-plans
--format json``), and the run settings they fill in."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from ..api_keys import normalize_version
from .output import FORMATS

F = TypeVar("F", bound=Callable[..., Any])
#: a whole number from 1 (pages, amounts, limits)
POSITIVE = click.IntRange(min=1)


@dataclass
class Settings:
    """The global options of this run (``None``: not given, the profile or default decides)."""

    profile: str | None = None
    format: str | None = None
    api_version: str | None = None


def settings_of(ctx: click.Context) -> Settings:
    return ctx.ensure_object(Settings)


def _remember(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    if value is not None and param.name is not None:
        setattr(settings_of(ctx), param.name, value)
    return value


def _version(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    normalized = normalize_version(value)
    if normalized is None:
        raise click.BadParameter(f"{value[:20]!r} is not a version such as 1.1 (MAJOR.MINOR)")
    return _remember(ctx, param, normalized)  # type: ignore[no-any-return]


def global_options(function: F) -> F:
    """Add the three global options; a value given later on the line wins."""
    options = [
        click.option(
            "--profile",
            metavar="NAME",
            expose_value=False,
            callback=_remember,
            help="Profile to use (default: $SVC_PROFILE, else the active profile).",
        ),
        click.option(
            "--format",
            type=click.Choice(FORMATS),
            expose_value=False,
            callback=_remember,
            help="Output: a readable table (default) or the service's JSON only.",
        ),
        click.option(
            "--api-version",
            "api_version",
            metavar="MAJOR.MINOR",
            expose_value=False,
            callback=_version,
            help="Service-Version header to send (default: the profile's, else 1.1).",
        ),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def listing_options(noun: str, *, sort: bool = True) -> Callable[[F], F]:
    """``--page`` and ``--offset`` (``noun`` per page) of a listing, and with ``sort`` its
    ``--sort-by`` and ``--sort-order``, in that order in the help."""
    options = [
        click.option(
            "--page", type=POSITIVE, metavar="N", default=1, show_default=True, help="Page number."
        ),
        click.option(
            "--offset",
            type=POSITIVE,
            metavar="N",
            default=10,
            show_default=True,
            help=f"{noun} per page.",
        ),
    ]
    if sort:
        options += [
            click.option("--sort-by", metavar="FIELD", help="Field to sort by, e.g. created."),
            click.option(
                "--sort-order",
                type=click.Choice(["asc", "desc"]),
                default="desc",
                show_default=True,
                help="Sort direction.",
            ),
        ]

    def apply(function: F) -> F:
        for option in reversed(options):
            function = option(function)
        return function

    return apply
