"""Text from the service or an agent, made safe to show a model: one line, bounded, quoted as data.

Plan and agent names, descriptions and hints are written by strangers. Before any of it enters a
prompt (the balance context, a tool's result text) it is reduced to a single line without control
or invisible formatting characters (so it cannot start a forged ``SYSTEM`` line, reorder text
with bidi overrides or hide words behind zero-width joiners), cut to a length, and, where it sits
among the plugin's own words, JSON-quoted so the model reads it as a value, not an instruction.
"""

from __future__ import annotations

import json
import unicodedata
from typing import Final

ELLIPSIS: Final = "…"
DEFAULT_LIMIT: Final = 200
#: Plan and agent names: long enough to tell plans apart, too short to carry a speech.
NAME_LIMIT: Final = 80

# Unicode categories removed outright: Cc (C0/C1 controls: newlines, ESC, NUL...), Cf (format:
# bidi embeddings/overrides/isolates, zero-width space/joiners, BOM, soft hyphen...), Cs (lone
# surrogates, which cannot be encoded), Co (private use) and Cn (unassigned).
_DROPPED_CATEGORIES: Final = frozenset({"Cc", "Cf", "Cs", "Co", "Cn"})
# Line and paragraph separators (Zl, Zp) and every other space (Zs) become one plain space.
_SPACE_CATEGORIES: Final = frozenset({"Zl", "Zp", "Zs"})
# Whitespace controls that separate words: they become a space rather than gluing words together.
_SPACING_CONTROLS: Final = frozenset("\t\n\v\f\r\x1c\x1d\x1e\x1f\x85")


def _as_text(text: object) -> str:
    if isinstance(text, str):
        return text
    if text is None:
        return ""
    try:
        return str(text)
    except Exception:  # a hostile __str__ must not break the caller
        return ""


def one_line(text: object, limit: int = DEFAULT_LIMIT) -> str:
    """``text`` as one clean line of at most ``limit`` characters (an ellipsis marks a cut).

    Control, format (bidi, zero-width), surrogate, private-use and unassigned characters are
    removed; line breaks, tabs and unusual spaces become single spaces; runs of spaces collapse
    and the ends are stripped. Never raises: a non-string is converted with ``str`` (or dropped).
    """
    try:
        raw = _as_text(text)
        if (  # already one clean line (most names): nothing to remove, collapse or cut
            raw.isascii()
            and raw.isprintable()
            and len(raw) <= max(int(limit), 1)
            and "  " not in raw
            and not raw.startswith(" ")
            and not raw.endswith(" ")
        ):
            return raw
        out: list[str] = []
        pending_space = False
        for ch in raw:
            if ch in _SPACING_CONTROLS:
                pending_space = True
                continue
            category = unicodedata.category(ch)
            if category in _SPACE_CATEGORIES:
                pending_space = True
                continue
            if category in _DROPPED_CATEGORIES:
                continue
            if pending_space and out:
                out.append(" ")
            pending_space = False
            out.append(ch)
        cleaned = "".join(out)
        bound = max(int(limit), 1)
        if len(cleaned) <= bound:
            return cleaned
        return cleaned[: bound - 1].rstrip() + ELLIPSIS
    except Exception:
        return ""


def quoted(text: object, limit: int = DEFAULT_LIMIT) -> str:
    """``text`` cleaned by :func:`one_line` and JSON-quoted: a value to show, never to follow.

    Non-ASCII letters stay readable (``ensure_ascii=False``); the quotes and backslashes the
    text itself contains are escaped, so it cannot close the quote and continue as prose.
    """
    return json.dumps(one_line(text, limit), ensure_ascii=False)


class TooBig(ValueError):
    """A stranger's JSON value nested deeper or larger than the caller shows."""


def clean_json(
    value: object, *, max_depth: int, max_bytes: int, string_limit: int = DEFAULT_LIMIT
) -> object:
    """A stranger's JSON value (an MCP tool's input schema) safe to show a model: every string,
    keys included, through :func:`one_line` (``string_limit``; keys 100), at most 100 items per
    object or list; :class:`TooBig` when it nests deeper than ``max_depth`` or its cleaned JSON
    exceeds ``max_bytes`` (the caller shows something plainer instead)."""

    def walk(item: object, depth: int) -> object:
        if depth > max_depth:
            raise TooBig(f"nested deeper than {max_depth} levels")
        if isinstance(item, dict):
            return {
                one_line(_as_text(key)[:800], 100): walk(inner, depth + 1)
                for key, inner in list(item.items())[:100]
            }
        if isinstance(item, list | tuple):
            return [walk(inner, depth + 1) for inner in list(item)[:100]]
        if item is None or isinstance(item, bool):
            return item
        if isinstance(item, int | float):
            return item if len(repr(item)) <= 40 else one_line(repr(item), 40)
        return one_line(_as_text(item)[: string_limit * 8], string_limit)

    try:
        cleaned = walk(value, 0)
        size = len(json.dumps(cleaned, ensure_ascii=False, allow_nan=False).encode())
    except (RecursionError, ValueError) as exc:  # TooBig is a ValueError
        raise TooBig(str(exc)[:80]) from None
    if size > max_bytes:
        raise TooBig(f"larger than {max_bytes} bytes")
    return cleaned


def plural(count: int, word: str, many: str | None = None) -> str:
    """``1 credit``, ``2 credits``, ``0 calls``: a count with its noun agreeing."""
    return f"{count} {word if count == 1 else (many or word + 's')}"


def credits_text(value: object) -> str:
    """``1 credit``, ``5 credits`` from a count or its decimal string (a service's big
    integer); anything else (``?``, ``None``) as ``? credits``."""
    text = str(value).strip() if value is not None else "?"
    return plural(int(text), "credit") if text.isdigit() else f"{text} credits"
