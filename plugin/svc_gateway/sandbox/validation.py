"""Reading request bodies and query strings into checked Python values.

Every route reads its input through these helpers, so a wrong type, a missing field or a
number that lost precision is a 400 with a message naming the field, never a 500.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

from aiohttp import web

from ..encoding import is_address, to_int
from .errors import (
    INVALID_QUERY,
    MALFORMED_JSON,
    PRECISION_LOST,
    ApiError,
    bad_request,
)

MAX_SAFE_INT = 2**53 - 1
UINT256_MAX = 2**256 - 1
_DIGITS = re.compile(r"[0-9]{1,78}")


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


def _not_unicode() -> ApiError:
    return bad_request(
        "The body contains text that is not valid Unicode (a lone surrogate escape)",
        "Send UTF-8 text; \\ud800-\\udfff escapes must come in pairs",
        code=MALFORMED_JSON,
    )


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_precision(document: Any) -> None:
    """Reject JSON numbers beyond 2^53−1 (a JavaScript client already lost their digits) and
    strings with lone surrogates (no database or UTF-8 answer can hold them)."""
    stack = [document]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
            if not all(_encodable(key) for key in item):
                raise _not_unicode()
        elif isinstance(item, str):
            if not _encodable(item):
                raise _not_unicode()
        elif isinstance(item, list):
            stack.extend(item)
        elif (
            isinstance(item, int | float)
            and not isinstance(item, bool)
            and abs(item) > MAX_SAFE_INT
        ):
            raise ApiError(
                400,
                PRECISION_LOST,
                f"A JSON number ({item!r:.40}) is larger than 2^53-1 and may have lost precision",
                'Send big integers as decimal strings, for example "1000000000000000000"',
            )


async def read_json(request: web.Request, *, optional: bool = False) -> dict[str, Any]:
    """The request body as a JSON object; ``{}`` for an empty body when ``optional``."""
    raw = await request.read()
    if not raw.strip():
        if optional:
            return {}
        raise bad_request("A JSON object body is required", code=MALFORMED_JSON)
    try:
        document = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except (ValueError, RecursionError) as error:
        raise bad_request(
            "The body is not valid JSON", "Send a UTF-8 JSON object", code=MALFORMED_JSON
        ) from error
    if not isinstance(document, dict):
        raise bad_request("The body must be a JSON object", code=MALFORMED_JSON)
    _check_precision(document)
    return document


# -- fields ----------------------------------------------------------------------------------


def obj(data: Mapping[str, Any], key: str, where: str, *, required: bool = True) -> dict[str, Any]:
    value = data.get(key)
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        raise bad_request(f"{where}{key} must be an object")
    return value


def text(
    data: Mapping[str, Any],
    key: str,
    where: str = "",
    *,
    required: bool = True,
    max_len: int = 2048,
) -> str | None:
    """A string field; blank counts as missing when required."""
    value = data.get(key)
    if value is None:
        if required:
            raise bad_request(f"{where}{key} is required")
        return None
    if not isinstance(value, str):
        raise bad_request(f"{where}{key} must be a string")
    if len(value) > max_len:
        raise bad_request(f"{where}{key} is longer than {max_len} characters")
    if required and not value.strip():
        raise bad_request(f"{where}{key} must not be blank")
    return value


def req_text(data: Mapping[str, Any], key: str, where: str = "", *, max_len: int = 2048) -> str:
    value = text(data, key, where, max_len=max_len)
    assert value is not None
    return value


def flag(data: Mapping[str, Any], key: str, where: str = "", *, default: bool | None) -> bool:
    """A boolean field; ``default=None`` makes it required."""
    value = data.get(key)
    if value is None:
        if default is None:
            raise bad_request(f"{where}{key} is required (true or false)")
        return default
    if not isinstance(value, bool):
        raise bad_request(f"{where}{key} must be true or false")
    return value


def parse_bigint(value: object, name: str, *, low: int = 0, high: int = UINT256_MAX) -> int:
    """A big integer sent as a decimal string or a JSON integer, within ``[low, high]``."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise bad_request(
            f'{name} must be an integer (a decimal string such as "10")',
            "Send big integers as decimal strings",
        )
    if isinstance(value, str) and not _DIGITS.fullmatch(value.strip()):
        raise bad_request(f"{name} must be a non-negative decimal integer string")
    number = to_int(value)
    if number < low or number > high:
        raise bad_request(f"{name} must be between {low} and {high}")
    return number


def bigint(
    data: Mapping[str, Any],
    key: str,
    where: str = "",
    *,
    default: int | None = None,
    low: int = 0,
    high: int = UINT256_MAX,
) -> int:
    """A big-integer field; ``default=None`` makes it required."""
    value = data.get(key)
    if value is None:
        if default is None:
            raise bad_request(f"{where}{key} is required")
        return default
    return parse_bigint(value, f"{where}{key}", low=low, high=high)


def address(value: object, name: str) -> str:
    """A wallet address, lower-cased so lookups never depend on checksum casing."""
    if not is_address(value):
        raise bad_request(f"{name} must be an address (0x followed by 40 hex digits)")
    return str(value).lower()


def str_list(
    data: Mapping[str, Any], key: str, where: str = "", *, max_items: int = 100
) -> list[str]:
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise bad_request(f"{where}{key} must be a list of strings")
    if len(value) > max_items:
        raise bad_request(f"{where}{key} has more than {max_items} items")
    return list(value)


def identifier(value: object, name: str) -> str:
    """An id sent as a string (or a JSON integer, for plan ids typed as integers)."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return str(value)
    if not isinstance(value, str) or not value.strip() or len(value) > 200:
        raise bad_request(f"{name} must be a non-empty string id")
    return value.strip()


# -- query strings ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Paging:
    """One page of a list: 1-based ``page``, ``size`` items (the wire calls it ``offset``)."""

    page: int
    size: int
    sort_by: str
    descending: bool

    @property
    def skip(self) -> int:
        return (self.page - 1) * self.size

    def envelope(self, total: int, key: str, items: list[dict[str, Any]]) -> dict[str, Any]:
        return {"total": total, "page": self.page, "offset": self.size, key: items}


def _query_int(query: Mapping[str, str], key: str, default: int, low: int, high: int) -> int:
    raw = query.get(key)
    if raw is None or raw == "":
        return default
    if not re.fullmatch(r"[0-9]{1,9}", raw.strip()):
        raise bad_request(f"Query parameter {key} must be an integer", code=INVALID_QUERY)
    value = int(raw)
    if not low <= value <= high:
        raise bad_request(
            f"Query parameter {key} must be between {low} and {high}", code=INVALID_QUERY
        )
    return value


def paging(query: Mapping[str, str], *, page_size_alias: bool = False) -> Paging:
    """``page``, ``offset`` (page size; or ``pageSize``), ``sortBy``, ``sortOrder``."""
    page = _query_int(query, "page", 1, 1, 1_000_000)
    size_key = "offset"
    if page_size_alias and "offset" not in query and "pageSize" in query:
        size_key = "pageSize"
    size = _query_int(query, size_key, 10, 1, 100)
    sort_by = query.get("sortBy") or "created"
    if sort_by not in ("created", "name"):
        raise bad_request("sortBy must be 'created' or 'name'", code=INVALID_QUERY)
    order = (query.get("sortOrder") or "desc").lower()
    if order not in ("asc", "desc"):
        raise bad_request("sortOrder must be 'asc' or 'desc'", code=INVALID_QUERY)
    return Paging(page, size, sort_by, order == "desc")
