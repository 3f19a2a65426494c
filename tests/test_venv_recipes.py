"""Commands work as written outside an activated venv's assumptions: the set-up ends with the one
line that activates the venv (it puts its ``python`` first on PATH), and
``scripts/mutation.sh`` runs on a machine with no bare ``python`` (Debian)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs_recipes import DOCS_SET_UP, README_SET_UP, ROOT, blocks

SET_UP_DEMO = "python3 -m venv .venv && .venv/bin/pip install -q -e . && .venv/bin/svc-gateway demo"
SET_UP_TESTS = (
    "python3 -m venv .venv && .venv/bin/pip install -q -e '.[test,hermes,bench]' && "
    ".venv/bin/python -m pytest -q -n 2"
)


@pytest.mark.parametrize("recipe", [README_SET_UP, DOCS_SET_UP], ids=["README", "docs"])
def test_set_up_ends_with_activating_the_venv_it_made(recipe: object, tmp_path: Path) -> None:
    (_, demo), (_, tests), (_, activate) = blocks(recipe)  # type: ignore[arg-type]
    assert demo.strip() == SET_UP_DEMO and tests.strip() == SET_UP_TESTS  # byte for byte
    assert activate.strip() == ". .venv/bin/activate"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", ".venv"], cwd=tmp_path, check=True
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    shown = subprocess.run(
        ["bash", "-c", f"{activate}\npython -c 'import sys; print(sys.prefix)'"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(shown.stdout.strip()) == tmp_path / ".venv"


def test_mutation_script_runs_without_a_bare_python_on_path(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"  # bash, dirname and python3, but no `python`
    bin_dir.mkdir()
    for tool in ("bash", "dirname", "python3"):
        found = shutil.which(tool, path="/usr/bin:/bin")
        assert found is not None, tool
        (bin_dir / tool).symlink_to(found)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "VIRTUAL_ENV")}
    env["PATH"] = str(bin_dir)
    run = subprocess.run(
        [str(bin_dir / "bash"), str(ROOT / "scripts" / "mutation.sh"), "--help"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert "--group" in run.stdout


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    """Issue 42: CI's main test step is the README's test command, read from the README by
    scripts/readme_command.py and run as it is, so the two cannot drift apart."""
    printed = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "readme_command.py"), "tests"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert printed == SET_UP_TESTS
    demo = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "readme_command.py"), "demo"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert demo == SET_UP_DEMO
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert f'README_TESTS="{SET_UP_TESTS}"' in ci  # the README's line, verbatim
    assert '"$(python3 scripts/readme_command.py tests)" != "$README_TESTS"' in ci  # checked
    assert 'eval "$README_TESTS"' in ci
