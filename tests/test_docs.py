"""The docs hold what the tests run: every recipe a test claims is found, the README's links land,
Python recipes use the current import paths, and the configuration page lists every key."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from svc_gateway.config import config_schema
from tests.docs_recipes import DOCS, RECIPES, ROOT, Recipe, blocks, section_of

README = ROOT / "README.md"
PAGES = sorted(DOCS.glob("*.md"))
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_PYTHON = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
_IMPORT = re.compile(r"^(?:from svc_gateway\S* import .+|import svc_gateway\S*)$", re.MULTILINE)


def slug(heading: str) -> str:
    """A heading's anchor as MkDocs (toc) and code hosts both write it for plain headings."""
    text = re.sub(r"[^\w\s-]", "", heading).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    return {slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, re.MULTILINE)}


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_every_recipe_a_test_runs_is_found_where_it_says(name: str) -> None:
    recipe: Recipe = RECIPES[name]
    assert blocks(recipe), name  # the page, the heading and exactly `count` blocks


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_every_recipe_is_run_by_the_test_it_names(name: str) -> None:
    test = ROOT / RECIPES[name].test
    assert test.is_file(), f"{name}: {RECIPES[name].test} is gone"
    assert re.search(rf"\b{name}\b", test.read_text(encoding="utf-8")), (
        f"{RECIPES[name].test} does not read {name}"
    )


def test_a_renamed_heading_fails_loudly(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Page\n\n## Renamed\n\n```bash\n# a comment, not a heading\necho hi\n```\n")
    with pytest.raises(AssertionError, match="no heading '## Sandbox with curl'"):
        section_of(page, "## Sandbox with curl")
    assert "# a comment, not a heading" in section_of(page, "## Renamed")


def test_every_test_the_docs_name_exists() -> None:
    named = {
        path
        for page in [README, *PAGES]
        for path in re.findall(r"`(tests/[\w/]+\.py)`", page.read_text(encoding="utf-8"))
    }
    assert named, "the docs name the tests that run their recipes"
    assert sorted(path for path in named if not (ROOT / path).is_file()) == []


def test_the_readme_links_into_the_docs_and_every_link_lands() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) < 150
    local = [link for link in _LINK.findall(text) if "://" not in link]
    assert {link.split("#")[0] for link in local} >= {f"docs/{page.name}" for page in PAGES}
    for link in local:
        path, _, anchor = link.partition("#")
        target = ROOT / path
        assert target.is_file(), link
        assert not anchor or anchor in anchors(target), link


def test_python_recipes_import_the_current_paths_without_warnings() -> None:
    imports = [
        line
        for page in PAGES
        for block in _PYTHON.findall(page.read_text(encoding="utf-8"))
        for line in _IMPORT.findall(block)
    ]
    assert "from svc_gateway.selling import RouteConfig, build_payment_app" in imports
    assert "from svc_gateway.selling.ways_in.mcp import Options, create_server, serve" in imports
    assert not [line for line in imports if re.search(r"svc_gateway\.paid(_mcp)?\b", line)]
    done = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning", "-c", "\n".join(imports)],
        env={**os.environ, "PYTHONPATH": str(ROOT / "plugin")},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]


def _hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "config_reference", DOCS / "hooks" / "config_reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_configuration_page_is_generated_with_every_key() -> None:
    hook = _hook()
    page = (DOCS / "configuration.md").read_text(encoding="utf-8")
    assert page.count(hook.MARKER) == 1
    rendered = hook.on_page_markdown(page, page=None, config=None, files=None)
    assert hook.MARKER not in rendered
    schema = config_schema()
    for key, prop in schema["properties"].items():
        row = next(line for line in rendered.splitlines() if f'<a id="{key}"></a>`{key}`' in line)
        assert " ".join(prop["description"].split())[:20].replace("<", "&lt;") in row, key
    stateurl = next(line for line in rendered.splitlines() if "`stateUrl`" in line)
    assert "redis://" in stateurl
    port = next(line for line in rendered.splitlines() if "`paidEndpointPort`" in line)
    assert "integer ≥ 0, ≤ 65535" in port and "`8402`" in port
    assert "### PlanRef" in rendered
