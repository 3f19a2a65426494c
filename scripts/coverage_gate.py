"""Fail when a money-moving module's branch coverage is below the bar (default 95%).

Reads the JSON report of coverage.py (``coverage json -o build/coverage.json``) and prints
branch and line coverage for each gated module, then exits 1 if any is below ``--min``.

    python scripts/coverage_gate.py --json build/coverage.json [--min 95]

Gated: selling (every module of ``svc_gateway/selling`` but the MCP way in), the sandbox ledger
and facilitator, the order tools in ``tools/subscriber.py``, ``svc_queryAgent`` (``tools/query.py``
and ``buying/``) and the client's HTTP plumbing and error mapping (``service/transport.py``). A
target that matches nothing fails too, so a rename cannot silently drop a module from the gate.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Target:
    """Module paths (regex, relative to the package) and optionally the functions that count."""

    label: str
    module: str
    functions: str | None = None


TARGETS = (
    Target("selling", r"selling/(flow/|state/|ways_in/)?[^/]+\.py"),
    Target("sandbox ledger", r"sandbox/ledger\.py"),
    Target("sandbox facilitator", r"sandbox/facilitator\.py"),
    Target("order tools", r"tools/subscriber\.py", r"(order|quote|price)"),
    Target("buying", r"(tools/query|buying/[^/]+)\.py"),
    Target("client transport", r"service/transport\.py"),
)


@dataclass
class Counts:
    branches: int = 0
    covered_branches: int = 0
    statements: int = 0
    covered_statements: int = 0

    def add(self, summary: dict[str, Any]) -> None:
        self.branches += int(summary.get("num_branches", 0))
        self.covered_branches += int(summary.get("covered_branches", 0))
        self.statements += int(summary.get("num_statements", 0))
        self.covered_statements += int(summary.get("covered_lines", 0))

    @property
    def branch_pct(self) -> float:
        return 100.0 * self.covered_branches / self.branches if self.branches else 100.0

    @property
    def line_pct(self) -> float:
        return 100.0 * self.covered_statements / self.statements if self.statements else 100.0


def package_path(path: str) -> str | None:
    """``plugin/svc_gateway/selling/flow/flow.py`` (or absolute) → ``selling/flow/flow.py``."""
    parts = Path(path).as_posix().split("svc_gateway/", 1)
    return parts[1] if len(parts) == 2 else None


def gate(report: dict[str, Any], minimum: float) -> tuple[list[str], bool]:
    lines: list[str] = []
    ok = True
    files: dict[str, dict[str, Any]] = {}
    for path, data in report.get("files", {}).items():
        rel = package_path(path)
        if rel is not None:
            files[rel] = data
    lines.append(f"{'module':<44} {'branches':>13} {'lines':>7}")
    for target in TARGETS:
        matched = sorted(rel for rel in files if re.fullmatch(target.module, rel))
        if not matched:
            lines.append(f"{target.label}: FAIL no measured module matches {target.module!r}")
            ok = False
            continue
        for rel in matched:
            counts = Counts()
            name = rel
            if target.functions is None:
                counts.add(files[rel]["summary"])
            else:
                functions = {
                    fn: data
                    for fn, data in files[rel].get("functions", {}).items()
                    if fn and re.search(target.functions, fn)
                }
                if not functions:
                    lines.append(f"{rel}: FAIL no function matches {target.functions!r}")
                    ok = False
                    continue
                for data in functions.values():
                    counts.add(data["summary"])
                name = f"{rel} ({len(functions)} functions)"
            below = counts.branch_pct < minimum
            ok = ok and not below
            verdict = "  FAIL" if below else ""
            lines.append(
                f"{name:<44} {counts.branch_pct:5.1f}% {counts.covered_branches:>3}/"
                f"{counts.branches:<3} {counts.line_pct:5.1f}%{verdict}"
            )
            if target.functions is not None:
                lines.append(f"    ({', '.join(sorted(functions))})")
    return lines, ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=Path("build/coverage.json"))
    parser.add_argument("--min", type=float, default=95.0, help="branch coverage bar, percent")
    args = parser.parse_args(argv)
    try:
        report = json.loads(args.json.read_text())
    except (OSError, ValueError) as exc:
        print(f"coverage gate: cannot read {args.json} ({exc}); run `coverage json` first")
        return 2
    lines, ok = gate(report, args.min)
    print(f"== branch coverage of money-moving modules (bar {args.min:g}%)")
    print("\n".join(lines))
    if not ok:
        print(f"coverage gate: FAILED (a money-moving module is below {args.min:g}% of branches)")
        return 1
    print("coverage gate: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
