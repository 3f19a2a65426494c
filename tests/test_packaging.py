"""The package is publishable the day it is published: complete metadata, and until then no
install line names the unpublished package without the checkout's line (issue 26 item 9).
``python -m build`` + ``twine check --strict`` run where the test extra is installed (CI), and
are skipped where build or twine is missing."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.docs_recipes import DOCS, ROOT

PACKAGE = "svc-gateway-plugin"
#: ``pip install svc-gateway-plugin`` or ``pip install 'svc-gateway-plugin[redis]'``
_INSTALL = re.compile(r"pip install\s+['\"]?svc-gateway-plugin\b")


def test_the_project_metadata_is_complete() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == PACKAGE
    for key in ("version", "description", "readme", "requires-python", "license", "authors"):
        assert project.get(key), key
    classifiers = project.get("classifiers", [])
    assert any(c.startswith("Programming Language :: Python :: 3.") for c in classifiers)
    assert "Typing :: Typed" in classifiers
    assert not any(c.startswith("License ::") for c in classifiers), "PEP 639: license only"


def test_no_install_line_names_the_unpublished_package_alone() -> None:
    """Every ``pip install svc-gateway-plugin…`` in the docs, the README and the plugin's own
    messages comes with the line that works today, from a checkout."""
    sources = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
    sources += sorted((ROOT / "plugin" / "svc_gateway").rglob("*.py"))
    bare = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sources
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if _INSTALL.search(line) and "from a checkout" not in line
    ]
    assert not bare, f"install lines without 'from a checkout': {bare}"


#: what a copy of the checkout for a build leaves out: venvs, caches, earlier builds, git
_NOT_SOURCE = shutil.ignore_patterns(
    ".git",
    ".venv",
    ".ci-venv*",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    ".*cache",
    ".hypothesis",
    ".coverage*",
    "mutants",
)


def test_the_package_builds_and_passes_twine_check(tmp_path: Path) -> None:
    if not (importlib.util.find_spec("build") and importlib.util.find_spec("twine")):
        pytest.skip("build and twine are not installed (the test extra has them)")
    # built from a copy: a build writes the egg-info and build/ in its tree, and CI installs the
    # small venvs (editable, into this checkout) while the tests run
    tree = tmp_path / "tree"
    shutil.copytree(ROOT, tree, ignore=_NOT_SOURCE)
    out = tmp_path / "dist"
    run = [sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(out), "."]
    subprocess.run(run, cwd=tree, check=True, capture_output=True, timeout=110)
    dists = sorted(str(path) for path in out.iterdir())
    assert len(dists) == 2, dists
    wheel = next(path for path in dists if path.endswith(".whl"))
    with zipfile.ZipFile(wheel) as archive:  # register reads the stored tool catalogue
        assert "svc_gateway/tools/tools.json" in archive.namelist()
    check = [sys.executable, "-m", "twine", "check", "--strict", *dists]
    subprocess.run(check, cwd=tree, check=True, capture_output=True, timeout=60)
