"""httpx is for svc_queryAgent's one-off calls to other agents only: the tools, buying/ and the
agent card import it inside the functions that use it, never when the plugin loads."""

from __future__ import annotations

import ast
from pathlib import Path

import svc_gateway

PACKAGE = Path(svc_gateway.__file__).parent


def top_level_imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_tools_and_agent_card_do_not_import_httpx_at_load() -> None:
    modules = [
        *sorted((PACKAGE / "tools").glob("*.py")),
        *sorted((PACKAGE / "buying").glob("*.py")),
        PACKAGE / "interop" / "agent_card.py",
    ]
    assert len(modules) > 5
    for module in modules:
        assert "httpx" not in top_level_imports(module), module.name
