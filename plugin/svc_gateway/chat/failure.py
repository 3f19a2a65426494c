"""A tool's own refusal (code, message, hint), raised in tools/ and buying/: an error result."""

from __future__ import annotations


class ToolFailure(Exception):
    """A tool's own refusal: becomes an error result with this code, message and hint."""

    def __init__(self, code: str, message: str, hint: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.hint = hint
