"""The Hermes settings in docs/hosts.md are valid plugin configs, and the offline one points at
the sandbox the page tells the reader to start."""

from __future__ import annotations

import re
from typing import Any

import yaml

from svc_gateway.config import load_config
from tests.docs_recipes import HERMES_SETTINGS, blocks, section_of


def hermes_blocks() -> tuple[str, list[dict[str, Any]]]:
    text = section_of(HERMES_SETTINGS.path, HERMES_SETTINGS.heading)
    loaded = [yaml.safe_load(block) for _, block in blocks(HERMES_SETTINGS)]
    return text, [b["plugins"]["entries"]["svc"]["settings"] for b in loaded]


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
