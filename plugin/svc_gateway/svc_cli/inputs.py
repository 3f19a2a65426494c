"""Reading what the user typed: JSON documents, addresses, expirations, config models.

Every refusal is a ``click.BadParameter`` (exit 2) naming the flag, raised while the command
line is parsed, before anything is sent.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import click
from pydantic import BaseModel, ValidationError

from ..encoding import ZERO_ADDRESS, is_address

M = TypeVar("M", bound=BaseModel)
MAX_JSON_BYTES = 1024 * 1024


def bad(flag: str, message: str) -> click.BadParameter:
    """A refusal naming ``flag`` (``--credits-config``), for checks made after parsing."""
    return click.BadParameter(message, param_hint=f"'{flag}'")


def read_json(text: str) -> dict[str, Any]:
    """A JSON object from a file, ``-`` (stdin) or the text itself; ``ValueError`` says why."""
    text = text.strip()
    if text == "-":
        raw, where = sys.stdin.read(MAX_JSON_BYTES + 1), "stdin"
    elif text.startswith(("{", "[")):
        raw, where = text, "the JSON text"
    else:
        path = Path(text).expanduser()
        try:
            if path.stat().st_size > MAX_JSON_BYTES:
                raise ValueError(f"{text} is larger than 1 MiB")
            raw = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ValueError(f"no such file: {text}") from None
        except IsADirectoryError:
            raise ValueError(f"{text} is a directory, not a JSON file") from None
        except (OSError, UnicodeDecodeError) as error:
            raise ValueError(f"cannot read {text}: {type(error).__name__}") from None
        where = text
    if len(raw) > MAX_JSON_BYTES:
        raise ValueError(f"{where} is larger than 1 MiB")
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as error:
        raise ValueError(f"{where} is not valid JSON: {error.msg} (line {error.lineno})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{where} must hold a JSON object")
    return data


def json_input(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    """Option callback: a JSON file, ``-`` for stdin, or the JSON text (``{...}``)."""
    if value is None:
        return None
    try:
        return read_json(value)
    except ValueError as error:
        raise click.BadParameter(str(error), ctx, param) from None


def address_input(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Option callback: a wallet or contract address, ``0x`` and 40 hex digits."""
    if value is None:
        return None
    text = value.strip()
    if not is_address(text):
        raise click.BadParameter(
            f"{text[:60]!r} is not an address (0x followed by 40 hex digits)", ctx, param
        )
    return text


def seconds_input(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """Option callback: seconds from now, or an ISO 8601 time (``2030-01-01T00:00:00Z``)."""
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        seconds = int(text)
    else:
        try:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise click.BadParameter(
                f"{text[:40]!r} is neither a number of seconds nor an ISO 8601 time", ctx, param
            ) from None
        if moment.tzinfo is None:
            raise click.BadParameter("an ISO 8601 time needs a time zone (e.g. Z)", ctx, param)
        seconds = int(moment.timestamp() - time.time())
    if seconds < 1:
        raise click.BadParameter("must be in the future (at least 1 second from now)", ctx, param)
    return seconds


def field_names(model: type[BaseModel]) -> set[str]:
    """Every key a model accepts: field names and their camelCase aliases."""
    names: set[str] = set()
    for name, field in model.model_fields.items():
        names.add(name)
        if field.alias:
            names.add(field.alias)
    return names


def load_model(model: type[M], data: dict[str, Any], flag: str) -> M:
    """Validate a JSON object as ``model``; an unknown (non-null) key or a bad field is refused
    naming ``flag`` and the field, so a typo never silently drops a setting."""
    unknown = sorted(k for k, v in data.items() if k not in field_names(model) and v is not None)
    if unknown:
        raise bad(flag, f"unknown field(s) {', '.join(unknown[:5])}")
    try:
        return model.model_validate(data)
    except ValidationError as error:
        first = error.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "the document"
        message = str(first["msg"]).removeprefix("Value error, ")
        raise bad(flag, f"{where}: {message}") from None


def check_addresses(flag: str, values: Mapping[str, object]) -> None:
    """Each named value must be an address (the all-zero one included)."""
    for name, value in values.items():
        if value is not None and value != ZERO_ADDRESS and not is_address(value):
            raise bad(flag, f"{name} {str(value)[:60]!r} is not an address (0x + 40 hex digits)")
