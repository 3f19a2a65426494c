"""The Redis book against the in-process one: ``python -m benchmarks --only redis``.

Measured as the chain case is (:mod:`.floor`): each paid server (the in-process book, and
``stateUrl`` on a local ``redis-server``) pinned to one CPU, and everything else (wrk, the stub
facilitator, ``redis-server``, this process) to the others, the same for both sides; many short
rotating rounds, each side's median. Round by round the time-per-request ratio and the
server's CPU per request are given with their range, and ``redis-server``'s own CPU per
request beside them.

Why the figure moved between 0.9× and 1.8× in earlier runs, unpinned: ``redis-server`` is a
fourth busy process on a 2-core machine. Unpinned, the scheduler puts it beside the server
under test in some rounds and not in others, and the in-process side has no such neighbour;
the replica pays its Redis round trips in its own CPU (redis-py's work, two scripts a
request) *and* in the cores Redis takes. Pinned, Redis sits with the load, as it would on a
host of its own, and the figure is the replica's own cost.
"""

from __future__ import annotations

import concurrent.futures
import math
import os
from contextlib import ExitStack

from . import floor, load, procs
from .report import Figure, Report, Target

TOKEN = "bench-token"


def redis_pid(url: str) -> int | None:
    """The pid of the ``redis-server`` listening on ``url``'s port (its title names it)."""
    port = url.rsplit(":", 1)[1].split("/")[0]
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if b"redis-server" in cmdline and f":{port}".encode() in cmdline:
            return int(entry)
    return None


def _together(sides: list[floor.Side], c: int, duration: float, force_aiohttp: bool) -> float:
    """Every side loaded at once (``c`` connections split between them): the summed rate."""
    each = max(1, c // len(sides))
    with concurrent.futures.ThreadPoolExecutor(len(sides)) as pool:
        runs = [
            pool.submit(load.load, s.url, s.token, each, duration, force_aiohttp=force_aiohttp)
            for s in sides
        ]
        return sum(run.result().rps for run in runs)


def case_redis(
    report: Report,
    *,
    rounds: int,
    duration: float,
    replica_secs: float,
    replica_rounds: int,
    pin: bool = True,
    force_aiohttp: bool = False,
) -> None:
    """The Redis book's cost per paid request against the in-process book (pinned, median of
    ``rounds``), then two replicas on one Redis against one (unpinned: each may use a core)."""
    c = floor.HEADLINE_C
    split = procs.cpu_split(pin)
    server_cpus, load_cpus = split if split else (None, None)
    with ExitStack() as stack:
        stack.enter_context(procs.pinned(load_cpus))
        state_url = stack.enter_context(procs.redis_server())
        stub = stack.enter_context(procs.server("stub"))
        serve = ["-m", "benchmarks.serve", "paid", "--service", stub + "/api/v1"]

        def up(label: str, extra: list[str]) -> floor.Side:
            line = stack.enter_context(procs.spawn([*serve, *extra], cpus=server_cpus))
            return floor.Side(label, str(line["url"]), TOKEN, int(line["pid"]))

        local = up("paid endpoint, in-process book", [])
        shared = up("paid endpoint, stateUrl (Redis)", ["--state-url", state_url])
        for side in (local, shared):
            load.load(side.url, TOKEN, 4, min(1.0, duration), force_aiohttp=force_aiohttp)
        rpid = redis_pid(state_url)
        before = floor.cpu_seconds(rpid) if rpid else 0.0
        got = floor.medians([local, shared], c, rounds, duration, force_aiohttp=force_aiohttp)
        spent = floor.cpu_seconds(rpid) - before if rpid else math.nan
    # Redis works only for the shared side's rounds: its CPU over their requests (rate × time)
    answered = sum(got[shared.label].rates) * duration
    redis_us = spent / answered * 1e6 if answered else math.nan
    where = (
        f"servers on CPU {sorted(split[0])}, load and Redis on {sorted(split[1])}"
        if split
        else "no"
    )
    print(f"  pinned: {where}; {rounds} rounds of {duration:g} s")
    m_local, m_shared = got[local.label], got[shared.label]
    # time per request is the inverse rate: the shared side's cost is local rate / shared rate
    time_ratio = [1 / r for r in floor.per_round(m_shared, m_local)]
    cpu_ratio = floor.per_round(m_shared, m_local, cpu=True)
    print(
        f"  stateUrl / in-process, round by round: time per request {floor.spread(time_ratio)}, "
        f"CPU per request {floor.spread(cpu_ratio)}; redis-server {redis_us:.0f} µs CPU a request"
    )
    report.rows.append(
        {
            "case": "stateUrl / in-process, per round",
            "time_ratios": [round(r, 4) for r in time_ratio],
            "cpu_ratios": [round(r, 4) for r in cpu_ratio],
            "redis_server_cpu_us_per_request": round(redis_us, 1),
        }
    )
    for side in (local, shared):
        report.load_row(side.label, c, got[side.label].result)
    note = f"c={c}, median of {rounds}" + (", pinned" if split else "")
    rps_local, rps_redis = m_local.result.rps, m_shared.result.rps
    report.figure(
        Figure("stateUrl cost / in-process (time per request)", rps_local, rps_redis, note),
        Target("<=", 1.15),  # issue 30: within 15% of the in-process book
    )
    report.figure(
        Figure("CPU per request: stateUrl / in-process", m_shared.cpu_us, m_local.cpu_us, "µs")
    )
    one = two = 0.0
    with ExitStack() as stack:  # unpinned: two replicas may use both cores
        state_url = stack.enter_context(procs.redis_server())
        stub = stack.enter_context(procs.server("stub"))
        serve = ["-m", "benchmarks.serve", "paid", "--service", stub + "/api/v1"]
        first, second = (
            floor.Side(
                f"replica {i}",
                str(stack.enter_context(procs.spawn([*serve, "--state-url", state_url]))["url"]),
                TOKEN,
            )
            for i in (1, 2)
        )
        for side in (first, second):
            load.load(side.url, TOKEN, 4, min(1.0, replica_secs), force_aiohttp=force_aiohttp)
        for round_ in range(replica_rounds):  # interleaved, best of each
            for pair in (True, False) if round_ % 2 == 0 else (False, True):
                if pair:
                    two = max(two, _together([first, second], c, replica_secs, force_aiohttp))
                else:
                    one = max(one, load.load(first.url, TOKEN, c, replica_secs).rps)
    print(f"  one replica {one:.1f} req/s, two replicas {two:.1f} req/s (c={c} in all)")
    report.rows.append({"case": "stateUrl, one replica", "concurrency": c, "rps": one})
    report.rows.append({"case": "stateUrl, two replicas", "concurrency": c, "rps": two})
    report.figure(
        Figure("two replicas / one (stateUrl)", two, one, f"c={c} in all"), Target(">=", 1.0)
    )
