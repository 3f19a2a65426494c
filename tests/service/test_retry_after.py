"""``Retry-After`` is read defensively: seconds or an HTTP-date, never an exception."""

from __future__ import annotations

import email.utils

import pytest

from svc_gateway.service.transport import RETRY_AFTER_MAX, parse_retry_after

NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("", None),
        ("   ", None),
        ("soon", None),
        ("1 minute", None),
        ("nan", None),
        ("0x10", None),
        ("2", 2.0),
        (" 2.5 ", 2.5),
        ("0", 0.0),
        ("-5", 0.0),
        ("1e30", RETRY_AFTER_MAX),
        ("inf", RETRY_AFTER_MAX),
        (email.utils.formatdate(NOW + 90, usegmt=True), 90.0),
        (email.utils.formatdate(NOW - 90, usegmt=True), 0.0),
        ("Thu, 99 Foo 2026 99:99:99 GMT", None),
        ("Mon, 01 Jan 9999 00:00:00 GMT", RETRY_AFTER_MAX),
    ],
)
def test_parse_retry_after(value: str | None, expected: float | None) -> None:
    assert parse_retry_after(value, now=NOW) == expected
