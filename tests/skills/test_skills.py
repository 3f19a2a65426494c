"""The instructions file ships as package data, readable by any host."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from svc_gateway.skills import skill_text, skills
from svc_gateway.tools import TOOL_NAMES

ROOT = Path(__file__).resolve().parents[2]


def test_the_payments_skill_says_quote_confirm_pay_and_names_every_tool() -> None:
    (skill,) = [s for s in skills() if s.name == "payments"]
    assert skill.description.startswith("How to use the svc_* payment tools")
    text = skill_text("payments")
    assert text.startswith("---\nname: payments\n")
    for step in ("Quote.", "Ask the user.", "Confirm.", '"confirm": true'):
        assert step in text
    for name in TOOL_NAMES:
        assert f"`{name}`" in text, name
    with pytest.raises(KeyError):
        skill_text("nope")


def test_package_data_carries_every_skill() -> None:
    """pyproject's package-data globs match each SKILL.md, so an installed wheel has them."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    globs = config["tool"]["setuptools"]["package-data"]["svc_gateway"]
    package = ROOT / "plugin" / "svc_gateway"
    shipped = {path for pattern in globs for path in package.glob(pattern)}
    assert skills() and all(skill.path in shipped for skill in skills())
