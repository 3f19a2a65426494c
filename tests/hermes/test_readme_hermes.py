"""The README's Hermes settings are valid plugin configs, and the offline one points at the
sandbox the README tells the reader to start."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from svc_gateway.config import load_config

README = Path(__file__).resolve().parents[2] / "README.md"


def hermes_blocks() -> tuple[str, list[dict[str, Any]]]:
    text = README.read_text(encoding="utf-8")
    section = text.split("### In Hermes Agent", 1)[1].split("\n### ", 1)[0]
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", section, re.DOTALL)]
    return section, [b["plugins"]["entries"]["svc"]["settings"] for b in blocks]


def test_every_hermes_settings_block_is_a_valid_config() -> None:
    _, settings = hermes_blocks()
    assert len(settings) == 2
    for block in settings:
        filled = {k: str(v).replace("<sandbox host>", "sandbox.example") for k, v in block.items()}
        load_config(filled)


def test_the_offline_recipe_matches_the_sandbox_it_starts() -> None:
    section, settings = hermes_blocks()
    offline = settings[1]
    assert offline["environment"] == "local"
    port = re.search(r"svc-gateway sandbox --port (\d+)", section)
    assert port is not None
    assert offline["baseUrl"] == f"http://127.0.0.1:{port.group(1)}/api/v1"
    assert "pip install -e '.[hermes]'" in section
    assert "/svc_login env:SVC_API_KEY" in section
