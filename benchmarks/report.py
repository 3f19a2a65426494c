"""The suite's output: ratio figures with targets, a Markdown table, a JSON file, a PNG chart."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .load import LoadResult


@dataclass(frozen=True)
class Figure:
    """``value / baseline``, both measured in the same run; ``absolute`` for absolute targets."""

    name: str
    value: float
    baseline: float
    note: str = ""
    absolute: float | None = None
    unit: str = ""

    @property
    def ratio(self) -> float:
        if self.baseline:
            return self.value / self.baseline
        return math.inf if self.value else math.nan


@dataclass(frozen=True)
class Target:
    """``>=``/``<=`` bound the ratio, ``within`` bounds ``|ratio - 1|``, ``abs<=`` the value."""

    op: str
    bound: float

    def text(self, unit: str = "") -> str:
        if self.op == "within":
            return f"1 ± {self.bound:.0%}"
        if self.op == "abs<=":
            return f"≤ {self.bound:g} {unit}".strip()
        return f"{'≥' if self.op == '>=' else '≤'} {self.bound:g}×"

    def check(self, figure: Figure) -> bool:
        ratio = figure.ratio
        if self.op == ">=":
            return ratio >= self.bound
        if self.op == "<=":
            return ratio <= self.bound
        if self.op == "within":
            return abs(ratio - 1.0) <= self.bound
        if self.op == "abs<=":
            return figure.absolute is not None and figure.absolute <= self.bound
        raise ValueError(f"unknown target operator {self.op!r}")

    def by_how_much(self, figure: Figure) -> str:
        """For a miss: the factor between the measured value and the bound."""
        if self.op == "abs<=" and figure.absolute:
            return f"{figure.absolute / self.bound:.1f}× over"
        if self.op == ">=" and figure.ratio:
            factor = self.bound / figure.ratio
            if factor < 1.1:  # close: "1.0× short" would say nothing
                return f"{1 - figure.ratio / self.bound:.1%} short"
            return f"{factor:.1f}× short"
        if self.op == "<=":
            return f"{figure.ratio / self.bound - 1:.0%} over"
        return f"off by {abs(figure.ratio - 1):.0%}"


@dataclass
class Report:
    meta: dict[str, Any]
    rows: list[dict[str, Any]] = field(default_factory=list)
    figures: list[tuple[Figure, Target | None]] = field(default_factory=list)

    def load_row(self, label: str, concurrency: int, result: LoadResult) -> None:
        self.rows.append(
            {
                "case": label,
                "concurrency": concurrency,
                "rps": result.rps,
                "p50_ms": result.p50_ms,
                "p99_ms": result.p99_ms,
                "requests": result.requests,
                "errors": result.errors,
                "tool": result.tool,
            }
        )

    def figure(self, figure: Figure, target: Target | None = None) -> None:
        self.figures.append((figure, target))

    def verdicts(self) -> list[tuple[Figure, Target | None, bool | None]]:
        return [(f, t, t.check(f) if t else None) for f, t in self.figures]

    def table(self) -> str:
        meta = self.meta
        lines = [
            f"Run {meta['date']}, {meta['cores']} cores, Python {meta['python']}, load by "
            f"{meta['load generator']}, {meta['duration_s']:g} s per load run, best of "
            f"{meta.get('rounds', 1)} interleaved rounds, load average "
            f"{meta.get('load average', '?')} (start → end)"
            + (" (QUICK: smoke figures, not a measurement)" if meta.get("quick") else ""),
            "",
            "| figure | measured | ratio | target | result |",
            "|---|---|---|---|---|",
        ]
        for fig, target, ok in self.verdicts():
            if fig.absolute is not None:
                measured = f"{fig.absolute:,.1f} {fig.unit}"
            else:
                measured = f"{fig.value:,.1f} vs {fig.baseline:,.1f}"
            if fig.note:
                measured += f" ({fig.note})"
            result = "" if ok is None else ("pass" if ok else f"MISS ({target.by_how_much(fig)})")  # type: ignore[union-attr]
            lines.append(
                f"| {fig.name} | {measured} | {fig.ratio:.3g}× | "
                f"{target.text(fig.unit) if target else ''} | {result} |"
            )
        return "\n".join(lines)

    def as_json(self) -> dict[str, Any]:
        return {
            "meta": self.meta,
            "rows": self.rows,
            "figures": [
                {
                    "name": f.name,
                    "value": f.value,
                    "baseline": f.baseline,
                    "ratio": f.ratio,
                    "absolute": f.absolute,
                    "unit": f.unit,
                    "target": t.text(f.unit) if t else None,
                    "pass": ok,
                }
                for f, t, ok in self.verdicts()
            ],
        }

    def chart(self, path: Path) -> Path | None:
        """Requests/s per server at each concurrency (log scale) and the ratio figures."""
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("matplotlib is not installed (pip install '.[bench]'): no chart")
            return None
        fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5.5))
        series: dict[str, dict[int, float]] = {}
        for row in self.rows:
            if "rps" in row and "concurrency" in row and "tool" in row:
                series.setdefault(row["case"], {})[row["concurrency"]] = row["rps"]
        for label, points in series.items():
            xs = sorted(points)
            left.plot(xs, [max(points[x], 0.1) for x in xs], marker="o", label=label)
        left.set_xscale("log", base=2)
        left.set_yscale("log")
        left.set_xlabel("concurrent clients")
        left.set_ylabel("successful requests/s")
        left.set_title("Throughput (same run, loopback)")
        if series:
            left.legend(fontsize=8)
        left.grid(True, which="both", alpha=0.3)
        verdicts = self.verdicts()
        names = [f.name for f, _, _ in verdicts]
        ratios = [f.ratio if math.isfinite(f.ratio) else 0.0 for f, _, _ in verdicts]
        colors = [
            "grey" if ok is None else ("tab:green" if ok else "tab:red") for *_, ok in verdicts
        ]
        right.barh(range(len(names)), ratios, color=colors)
        right.set_yticks(range(len(names)), names, fontsize=8)
        right.invert_yaxis()
        right.set_xscale("log")
        right.axvline(1.0, color="black", linewidth=0.8)
        right.set_title("Ratios (green pass, red miss, grey no target)")
        fig.suptitle(
            f"svc benchmarks, {self.meta['date']}, {self.meta['cores']} cores, "
            f"{self.meta['load generator']}"
        )
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return path
