"""The tools as register hands them to a host come from the stored catalogue (tools.json), so
registering builds no pydantic model: the stored names, descriptions and JSON Schemas are
exactly what the tool modules declare, and a registered tool runs its module's code."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import svc_gateway
from svc_gateway.account.credentials import CredentialStore
from svc_gateway.host import CollectingGateway
from svc_gateway.tools import TOOL_NAMES, TOOLS
from svc_gateway.tools.catalogue import STORED, entry, generate, render


def test_stored_catalogue_equals_what_the_tool_models_generate() -> None:
    stored = json.loads(STORED.read_text(encoding="utf-8"))
    assert stored == generate(), "tools.json is stale: run python -m svc_gateway.tools"
    assert STORED.read_text(encoding="utf-8") == render()
    assert (
        [row["name"] for row in stored] == list(TOOL_NAMES) == sorted(TOOLS, key=TOOL_NAMES.index)
    )


def test_each_registered_spec_gets_its_own_copy_of_the_schema() -> None:
    first = entry("svc_checkBalance").parameters
    first["properties"].clear()  # a host that edits what it was given
    assert entry("svc_checkBalance").parameters == TOOLS["svc_checkBalance"].schema()


def test_registered_specs_carry_what_the_tools_declare(tmp_path: Path) -> None:
    host = CollectingGateway(
        {"environment": "local", "baseUrl": "http://127.0.0.1:9/api/v1"}, logging.getLogger("t")
    )
    handle = svc_gateway.register(host, store=CredentialStore(tmp_path, use_keyring=False))
    try:
        assert list(host.tools) == list(TOOL_NAMES)
        for name in TOOL_NAMES:
            spec = host.tools[name]
            assert spec.description == TOOLS[name].description
            assert spec.parameters == TOOLS[name].schema()
    finally:
        handle.close()
