"""The nearest known name to a mistyped one: config keys, tool parameters, chat commands and
tools all answer a typo with "did you mean …?" from here."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def nearest(word: str, known: Iterable[str]) -> str | None:
    """The known name closest to ``word`` (a case slip counts), or ``None`` when none is."""
    by_case = {name.lower(): name for name in known}
    if word.lower() in by_case:  # a case slip (planid) first: it is what was meant
        return by_case[word.lower()]
    close = difflib.get_close_matches(word.lower(), list(by_case), n=1, cutoff=0.6)
    return by_case[close[0]] if close else None


def did_you_mean(word: str, known: Iterable[str], prefix: str = "") -> str:
    """``" Did you mean <prefix><name>?"``, or ``""`` when nothing is close."""
    name = nearest(word, known)
    return f" Did you mean {prefix}{name}?" if name else ""
