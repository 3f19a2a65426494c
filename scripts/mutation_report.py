"""Summarise a mutmut 3 run: score per module and every surviving mutant with its diff line.

Run by scripts/mutation.py after ``mutmut run``; reads the ``*.meta`` files mutmut writes beside
each mutated module in ``mutants/``. Score = (killed + timeout + caught by type check) / all
mutants that were checked; "no tests" (code no selected test reaches) counts as surviving.

    python scripts/mutation_report.py --mutants build/mutation/paid/mutants [...] [--out FILE]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from collections import Counter
from pathlib import Path

KILLED = {"killed", "timeout", "caught by type check", "segfault"}
NOT_RUN = {"not checked", "check was interrupted by user", "skipped"}


def status_of(exit_code: int | None) -> str:
    from mutmut.stats import status_by_exit_code

    return str(status_by_exit_code[exit_code])


def describe(stage: Path, mutant: str, source: Path) -> str:
    """The mutated line(s) as ``old → new`` (one line), from mutmut's own diff."""
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    previous = Path.cwd()
    os.chdir(stage)
    try:
        diff = get_diff_for_mutant(mutant, path=source)
    except Exception as exc:  # the description is best effort; the name is what matters
        return f"(no diff: {type(exc).__name__})"
    finally:
        os.chdir(previous)
    removed = [ln[1:].strip() for ln in diff.splitlines() if ln.startswith("-") and ln[1:2] != "-"]
    added = [ln[1:].strip() for ln in diff.splitlines() if ln.startswith("+") and ln[1:2] != "+"]
    old = " / ".join(removed) or "(nothing)"
    new = " / ".join(added) or "(removed)"
    text = f"`{old}` → `{new}`"
    return text if len(text) < 240 else text[:237] + "…"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutants", type=Path, action="append", help="a mutants/ dir (repeatable)")
    parser.add_argument("--out", type=Path, help="also write the report (markdown) here")
    parser.add_argument("--seconds", type=int, help="wall time of the run, for the report")
    parser.add_argument("--no-diffs", action="store_true", help="skip the per-mutant diff text")
    args = parser.parse_args(argv)

    dirs: list[Path] = [d.resolve() for d in (args.mutants or [Path("build/mutation/mutants")])]
    found = [(d, meta) for d in dirs for meta in sorted(d.rglob("*.py.meta"))]
    if not found:
        print(f"no mutmut results under {', '.join(map(str, dirs))}: run scripts/mutation.sh")
        return 2
    rows: list[tuple[str, Counter[str]]] = []
    survivors: list[tuple[str, str, str]] = []
    total: Counter[str] = Counter()
    for mutants_dir, meta in found:
        stage = mutants_dir.parent
        source = meta.relative_to(mutants_dir).with_suffix("")  # src/svc_gateway/x.py
        module = str(source).removeprefix("src/")
        data = json.loads(meta.read_text())
        counts: Counter[str] = Counter()
        for mutant, code in sorted(data["exit_code_by_key"].items()):
            status = status_of(code)
            counts[status] += 1
            if status not in KILLED and status not in NOT_RUN:
                text = "" if args.no_diffs else describe(stage, mutant, source)
                survivors.append((module, f"{mutant} ({status})", text))
        if counts:
            rows.append((module, counts))
            total.update(counts)

    def score(c: Counter[str]) -> tuple[int, int, float]:
        killed = sum(c[s] for s in KILLED)
        checked = sum(c.values()) - sum(c[s] for s in NOT_RUN)
        return killed, checked, (100.0 * killed / checked if checked else 0.0)

    lines = [f"# Mutation testing ({datetime.date.today().isoformat()})", ""]
    if args.seconds is not None:
        lines += [f"Wall time of the run: {args.seconds} s.", ""]
    lines += [
        "| module | mutants | killed | survived | no tests | timeout | not run | score |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for module, c in [*rows, ("**total**", total)]:
        killed, _checked, pct = score(c)
        not_run = sum(c[s] for s in NOT_RUN)
        lines.append(
            f"| {module} | {sum(c.values())} | {killed} | {c['survived']} | {c['no tests']} "
            f"| {c['timeout']} | {not_run} | {pct:.1f}% |"
        )
    lines += ["", f"## Surviving mutants ({len(survivors)})", ""]
    lines += ["Show one with `cd build/mutation/GROUP && mutmut show NAME`.", ""]
    current = None
    for module, name, text in survivors:
        if module != current:
            lines += ["", f"### {module}", ""]
            current = module
        lines.append(f"- `{name}`: {text}" if text else f"- `{name}`")
    report = "\n".join(lines) + "\n"
    print("\n".join(lines[: 6 + len(rows) + 1]))
    print(f"surviving mutants: {len(survivors)} (full list in the report)")
    if args.out:
        args.out.write_text(report)
        print(f"report: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
