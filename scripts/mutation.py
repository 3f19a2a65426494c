"""Mutation testing of the money-moving modules with mutmut 3 (``pip install -e '.[mutation]'``).

    scripts/mutation.sh                  # every group, then the report
    scripts/mutation.sh --group selling     # one group (repeatable)
    scripts/mutation.sh --fresh          # forget cached results first
    scripts/mutation.sh --report         # only print/write the report of the last runs
    scripts/mutation.sh --sample 80      # a seeded random sample of 80 mutants per module

Why a script: mutmut 3 imports mutated code from ``./src`` or ``./`` while our package lives in
``plugin/``, so each group is staged as ``build/mutation/<group>/{src/svc_gateway,tests,...}``
and mutmut runs there. For each mutant mutmut runs only the tests that called the mutated
function; a group also narrows the test selection to its area's tests, because nearly every test
passes through the sandbox and the client, and running them all for each surviving mutant does
not fit on 2 cores. Results stay cached in the staging tree: a rerun only tests mutants of
functions whose source changed. The report (score per module, every surviving mutant with its
changed line) goes to ``build/mutation/report.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "build" / "mutation"


@dataclass(frozen=True)
class Group:
    name: str
    mutate: tuple[str, ...]  # paths under plugin/svc_gateway (globs allowed)
    tests: tuple[str, ...]  # test paths; missing ones are left out
    ignore: tuple[str, ...] = ()  # too slow to rerun per mutant


GROUPS = (
    # The 200-request concurrency test takes 7 s: rerun for every surviving mutant it would
    # double the run. Mutants only it could kill show up as survivors.
    Group(
        "selling",
        ("selling/*.py", "selling/flow/*", "selling/state/*", "selling/ways_in/*.py"),
        ("tests/selling", "tests/e2e"),
        ("tests/e2e/test_concurrency.py",),
    ),
    Group(
        "sandbox",
        ("sandbox/ledger.py", "sandbox/facilitator.py"),
        ("tests/sandbox", "tests/conformance"),
    ),
    Group(
        "tools",
        ("tools/subscriber.py", "tools/query.py", "buying/*"),
        (
            "tests/tools/test_tools.py",
            "tests/tools",
            "tests/buying",
            "tests/chat/test_commands_context.py",
        ),
    ),
    Group(
        "client",
        ("service/transport.py",),
        (
            "tests/service/test_client_faults.py",
            "tests/service/test_client_e2e.py",
            "tests/service",
            "tests/conformance/test_wire_equality.py",
        ),
    ),
)


def toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return "'" + value + "'" if "'" not in value else '"' + value.replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")


def staged_pyproject(text: str, group: Group) -> str:
    """The repository's pyproject.toml with [tool.mutmut] narrowed to one group."""
    settings = dict(tomllib.loads(text)["tool"]["mutmut"])
    settings["only_mutate"] = [f"src/svc_gateway/{path}" for path in group.mutate]
    selection = [path for path in group.tests if (ROOT / path).exists()]
    if not selection:
        raise SystemExit(f"group {group.name}: none of its tests exist: {group.tests}")
    base = settings.get("pytest_add_cli_args_test_selection", [])
    settings["pytest_add_cli_args_test_selection"] = (
        selection
        + [f"--ignore={path}" for path in group.ignore]
        + [arg for arg in base if arg.startswith("-") or arg in ("not hermes",)]
    )
    section = "[tool.mutmut]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in settings.items())
    return re.sub(r"(?ms)^\[tool\.mutmut\]\n.*?(?=^\[|\Z)", lambda _m: section + "\n", text)


def stage(group: Group, fresh: bool) -> Path:
    where = BUILD / group.name
    if fresh:
        shutil.rmtree(where, ignore_errors=True)
    (where / "src").mkdir(parents=True, exist_ok=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    # copytree keeps modification times, so mutmut skips files whose source did not change.
    shutil.rmtree(where / "src" / "svc_gateway", ignore_errors=True)
    shutil.copytree(ROOT / "plugin" / "svc_gateway", where / "src" / "svc_gateway", ignore=ignore)
    shutil.rmtree(where / "tests", ignore_errors=True)
    shutil.copytree(ROOT / "tests", where / "tests", ignore=ignore)
    shutil.rmtree(where / "mutants" / "tests", ignore_errors=True)  # stale copies of old tests
    for name in ("manifest.json", "README.md"):
        shutil.copy2(ROOT / name, where / name)
    shutil.rmtree(where / "docs", ignore_errors=True)  # the recipe tests read their blocks here
    shutil.copytree(ROOT / "docs", where / "docs", ignore=ignore)
    (where / "pyproject.toml").write_text(
        staged_pyproject((ROOT / "pyproject.toml").read_text(), group)
    )
    return where


def mutmut_run(where: Path, jobs: int, names: list[str], log: Path) -> int:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SVC_REQUIRE_ALL")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    mutmut = shutil.which("mutmut")
    if mutmut is None:
        raise SystemExit("mutmut is not installed: pip install -e '.[mutation]'")
    with log.open("a") as out:
        # mutmut draws a spinner with carriage returns; keep it in a log file, not in the terminal
        done = subprocess.run(
            [mutmut, "run", "--max-children", str(jobs), *names],
            cwd=where,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    return done.returncode


def sample_names(where: Path, per_module: int, seed: int) -> list[str]:
    """A seeded random sample of each module's mutants that have no result yet."""
    rng = random.Random(seed)
    names: list[str] = []
    for meta in sorted((where / "mutants").rglob("*.py.meta")):
        keys = sorted(json.loads(meta.read_text())["exit_code_by_key"].items())
        chosen = rng.sample(keys, min(per_module, len(keys)))
        names += [key for key, code in chosen if code is None]
    return names


def run_group(group: Group, jobs: int, fresh: bool, sample: int) -> tuple[int, float]:
    where = stage(group, fresh)
    print(f"== mutation group {group.name}: {', '.join(group.mutate)}", flush=True)
    started = time.monotonic()
    log = where / "mutmut.log"
    log.write_text("")
    names: list[str] = []
    if sample:
        # Generate the mutants and the test map only: a name that matches no mutant stops
        # mutmut right after that step (it exits non-zero, which is expected here).
        mutmut_run(where, jobs, ["svc_gateway.no_such_module.x_none__mutmut_1"], log)
        names = sample_names(where, sample, seed=11)
        print(f"   sampled {len(names)} mutants not yet tested ({sample} per module)")
    code = mutmut_run(where, jobs, names, log) if names or not sample else 0
    seconds = time.monotonic() - started
    tail = log.read_text(errors="replace").replace("\r", "\n").strip().splitlines()[-2:]
    print(f"   exit {code} after {seconds:.0f} s; {' | '.join(tail)[-300:]}", flush=True)
    return code, seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    names = [g.name for g in GROUPS]
    parser.add_argument("--group", action="append", choices=names, help="default: all")
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("MUTATION_JOBS", "0")))
    parser.add_argument("--fresh", action="store_true", help="drop cached results first")
    parser.add_argument("--report", action="store_true", help="only write the report")
    parser.add_argument(
        "--sample",
        type=int,
        default=0,
        metavar="N",
        help="test a seeded random sample of N mutants per module (an estimate, much faster)",
    )
    args = parser.parse_args(argv)
    chosen = [g for g in GROUPS if g.name in (args.group or names)]
    jobs = args.jobs or os.cpu_count() or 2
    status = 0
    seconds: dict[str, float] = {}
    if not args.report:
        for group in chosen:
            code, seconds[group.name] = run_group(group, jobs, args.fresh, args.sample)
            status = status or code
    sys.path.insert(0, str(ROOT / "scripts"))
    from mutation_report import main as report

    mutants = [str(BUILD / g.name / "mutants") for g in chosen if (BUILD / g.name).exists()]
    report_args = [
        *(a for m in mutants for a in ("--mutants", m)),
        "--out",
        str(BUILD / "report.md"),
    ]
    if seconds:
        report_args += ["--seconds", str(round(sum(seconds.values())))]
    code = report(report_args)
    return status or code


if __name__ == "__main__":
    sys.exit(main())
