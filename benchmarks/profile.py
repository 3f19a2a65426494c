"""A profile of the paid path under load, not a guess: ``python -m benchmarks --profile``.

Runs one server (the paid endpoint by default, or the route middleware) under ``py-spy record``
(``pip install py-spy``) against the stub facilitator, loads it at 32 clients, and writes
``profile-<kind>.txt`` (collapsed stacks, the input of any flame-graph tool) and
``profile-<kind>.svg`` (py-spy's flame graph) to ``--out``, then prints the functions that
hold the most samples: their own time (leaf of the stack) and, for this package's functions,
the time spent in them and below. The stub facilitator and wrk run as separate processes and
are not sampled. py-spy samples every thread (the paid endpoint runs on the plugin loop's).
"""

from __future__ import annotations

import collections
import re
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from . import load, procs

TOKEN = "bench-token"
SAMPLE_RATE = 250
_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^:()]+)(?::\d+)?\)$")


@dataclass(frozen=True)
class Costs:
    samples: int
    own: list[tuple[str, int]]
    ours: list[tuple[str, int]]


def frame_name(frame: str) -> str:
    """``func (path/to/module.py:12)`` → ``module.py:func`` (lines folded together)."""
    match = _FRAME.match(frame.strip())
    if match is None:
        return frame.strip()
    return f"{Path(match['file']).name}:{match['func']}"


def read_collapsed(text: str, top: int = 15) -> Costs:
    """Own (leaf) samples per function, and inclusive samples of ``svc_gateway`` functions,
    over the stacks that run on an event loop (the served requests, not start-up)."""
    own: collections.Counter[str] = collections.Counter()
    ours: collections.Counter[str] = collections.Counter()
    total = 0
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = stack.split(";")
        if not any("_run_once" in f for f in frames):
            continue  # not the served requests: start-up, imports, idle threads
        total += n
        own[frame_name(frames[-1])] += n
        seen = {frame_name(f) for f in frames if "svc_gateway" in f}
        for name in seen:
            ours[name] += n
    return Costs(total, own.most_common(top), ours.most_common(top))


def _record(kind: str, fmt: str, out: Path, duration: float) -> None:
    beside = Path(sys.executable).with_name("py-spy")  # a venv's, when PATH lacks it
    spy = shutil.which("py-spy") or (str(beside) if beside.exists() else None)
    if spy is None:
        raise RuntimeError("py-spy is not installed (pip install py-spy)")
    with procs.server("stub") as stub:
        args = [spy, "record", "--nonblocking", "-r", str(SAMPLE_RATE), "--format", fmt]
        args += ["-o", str(out), "--"]
        serve = ["-m", "benchmarks.serve", kind, "--service", stub + "/api/v1"]
        with procs.spawn(serve, prefix=args) as ready:
            load.load(str(ready["url"]), TOKEN, 4, 1)  # warm up
            load.load(str(ready["url"]), TOKEN, 32, duration)
            procs.signal_pid(int(ready["pid"]), signal.SIGTERM)  # py-spy writes when it ends
            deadline = time.monotonic() + 60
            while not out.exists() and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(0.5)  # let it finish the file


def profile(kind: str, out_dir: Path, duration: float) -> Costs:
    """Record ``kind`` twice under load (collapsed stacks, then the SVG) and read the first."""
    out_dir.mkdir(parents=True, exist_ok=True)
    raw, svg = out_dir / f"profile-{kind}.txt", out_dir / f"profile-{kind}.svg"
    _record(kind, "raw", raw, duration)
    _record(kind, "flamegraph", svg, duration)
    costs = read_collapsed(raw.read_text())
    print(f"  {costs.samples} samples of the {kind} server under load; wrote {raw} and {svg}")
    print("  own time (leaf functions):")
    for name, n in costs.own:
        print(f"    {n / costs.samples:6.1%}  {name}")
    print("  svc_gateway functions, inclusive:")
    for name, n in costs.ours:
        print(f"    {n / costs.samples:6.1%}  {name}")
    return costs
