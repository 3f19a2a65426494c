"""Instructions for the model that ship with the package (skills), for any host to load.

Each skill is a folder holding a ``SKILL.md`` (YAML front matter: ``name``, ``description``; a
markdown body). Hermes registers them as ``svc:<name>`` (``ctx.register_skill``); another host
reads :func:`skill_text` and puts it where its model reads instructions.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    path: Path


def _front_matter(text: str) -> dict[str, str]:
    if not text.startswith("---\n"):
        return {}
    head = text[4:].split("\n---", 1)[0]
    fields = {}
    for line in head.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    return fields


def skills() -> list[Skill]:
    """Every skill the package ships, sorted by name."""
    found = []
    for path in sorted(HERE.glob("*/SKILL.md")):
        meta = _front_matter(path.read_text(encoding="utf-8"))
        found.append(Skill(meta.get("name", path.parent.name), meta.get("description", ""), path))
    return found


def skill_text(name: str = "payments") -> str:
    """The SKILL.md of one skill (front matter included)."""
    for skill in skills():
        if skill.name == name:
            return skill.path.read_text(encoding="utf-8")
    raise KeyError(f"no skill named {name!r}")
