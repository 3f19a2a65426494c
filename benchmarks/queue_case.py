"""The settle queue the flow uses (``SettleJournal``): one add and one remove at 10,000 entries
against the same at 10 in the same run, how long the event loop stalls meanwhile, 100 adds at
once, and a 10,000-entry drain (compactions included).

Entries are the size of real ones (an x402 access token of ~1.2 KB, a ~0.6 KB envelope), in a
temporary directory (``TMPDIR``: put it on the disk the queue will live on; on a tmpfs
fsync costs nothing); every write is fsynced, as in production.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from svc_gateway.selling.state.protocols import PendingSettle
from svc_gateway.selling.state.settle_journal import SettleJournal

from .report import Figure, Report, Target

SIZES = (10, 10_000)
#: untimed operations first (the journal's thread, the page cache, the allocator)
WARMUP = 20


def pending(n: int, now: float) -> PendingSettle:
    envelope = {
        "x402Version": 2,
        "resource": {"url": "https://agent.example/svc/agent", "description": "an agent"},
        "accepts": [
            {
                "scheme": "nvm:erc4337",
                "network": "eip155:84532",
                "planId": "1" * 77,
                "extra": {"agentId": "2" * 77, "httpVerb": "POST", "n": n},
            }
        ],
        "extensions": {"bazaar": {"info": "x" * 200}},
    }
    token = f"{n:08d}" + "t" * 1200
    return PendingSettle(f"req-{n:08d}", "1" * 77, "0x" + "ab" * 20, 1, token, envelope, now)


@dataclass(frozen=True)
class Costs:
    add_ms: float
    remove_ms: float
    stall_ms: float  # the longest the event loop went without running
    loop_cpu_us: float  # the event loop thread's own CPU per operation


class Stall:
    """How much later than asked a 1 ms timer fired, at worst: how long the loop was blocked."""

    TICK = 0.001

    def __init__(self) -> None:
        self.longest = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        while True:
            start = time.perf_counter()
            await asyncio.sleep(self.TICK)
            self.longest = max(self.longest, time.perf_counter() - start - self.TICK)

    async def __aenter__(self) -> Stall:
        self._task = asyncio.get_running_loop().create_task(self._tick())
        await asyncio.sleep(0)  # the ticker is waiting on its timer before the first operation
        return self

    async def __aexit__(self, *_: object) -> None:
        await asyncio.sleep(2 * self.TICK)  # let it see the last operation's stall
        assert self._task is not None
        self._task.cancel()


async def _timed(op: Callable[[], Awaitable[None]]) -> tuple[float, float]:
    start, cpu = time.perf_counter(), time.thread_time()
    await op()
    return time.perf_counter() - start, time.thread_time() - cpu


def _journal_file(path: Path, size: int, now: float) -> None:
    lines = (
        json.dumps({"add": asdict(pending(n, now))}, separators=(",", ":")) for n in range(size)
    )
    path.write_text("".join(line + "\n" for line in lines))


async def journal_costs(directory: Path, size: int, ops: int) -> Costs:
    """The journal: one appended, fsynced line per change, written by its own thread."""
    now = time.time()
    path = directory / f"journal-{size}.json"
    _journal_file(path, size, now)
    store = await SettleJournal.open(path, max_entries=size + WARMUP + ops)
    adds, removes, cpu = [], [], 0.0
    try:
        async with Stall() as stall:
            for i in range(WARMUP + ops):
                extra = pending(size + i, now)
                if i < WARMUP:
                    await store.add(extra)
                    await store.remove(extra.request_id)
                    continue

                async def add(entry: PendingSettle = extra) -> None:
                    await store.add(entry)

                async def remove(entry: PendingSettle = extra) -> None:
                    await store.remove(entry.request_id)

                wall, spent = await _timed(add)
                adds.append(wall)
                cpu += spent
                wall, spent = await _timed(remove)
                removes.append(wall)
                cpu += spent
    finally:
        await store.aclose()
    return Costs(
        statistics.median(adds) * 1e3,
        statistics.median(removes) * 1e3,
        stall.longest * 1e3,
        cpu / (2 * ops) * 1e6,
    )


async def journal_burst(directory: Path, size: int, burst: int) -> float:
    """µs per add when ``burst`` adds arrive at once (they share fsyncs: group commit)."""
    now = time.time()
    path = directory / f"burst-{size}.json"
    _journal_file(path, size, now)
    store = await SettleJournal.open(path, max_entries=size + burst)
    try:
        start = time.perf_counter()
        await asyncio.gather(*(store.add(pending(size + i, now)) for i in range(burst)))
        return (time.perf_counter() - start) / burst * 1e6
    finally:
        await store.aclose()


async def journal_drain(directory: Path, size: int) -> tuple[float, float, int]:
    """Remove every entry, oldest first (the queue draining after an outage): mean ms per
    remove including the compactions on the way, the longest loop stall, the file's lines."""
    now = time.time()
    path = directory / f"drain-{size}.json"
    _journal_file(path, size, now)
    store = await SettleJournal.open(path)
    try:
        async with Stall() as stall:
            start = time.perf_counter()
            for entry in await store.entries():
                await store.remove(entry.request_id)
            mean = (time.perf_counter() - start) / size * 1e3
    finally:
        await store.aclose()
    return mean, stall.longest * 1e3, len(path.read_text().splitlines())


@dataclass(frozen=True)
class QueueFigures:
    costs: dict[int, Costs]
    burst_us: float
    drain_ms: float
    drain_stall_ms: float
    drain_lines: int


def _best(a: Costs | None, b: Costs) -> Costs:
    """The better of two rounds, figure by figure (discounts bursts from other tenants)."""
    if a is None:
        return b
    return Costs(*(min(x, y) for x, y in zip(vars(a).values(), vars(b).values(), strict=True)))


def measure(ops: int, drain_size: int, rounds: int, work_dir: str | None = None) -> QueueFigures:
    async def run() -> QueueFigures:
        with tempfile.TemporaryDirectory(prefix="svc-bench-queue-", dir=work_dir) as tmp:
            directory = Path(tmp)
            print(f"  files in {directory} (TMPDIR)", flush=True)
            best: dict[int, Costs | None] = dict.fromkeys(SIZES)
            for round_ in range(rounds):  # interleaved, the order flipping every round
                for size in SIZES if round_ % 2 == 0 else SIZES[::-1]:
                    here = directory / f"round-{round_}"
                    here.mkdir(exist_ok=True)
                    best[size] = _best(best[size], await journal_costs(here, size, ops))
            burst = await journal_burst(directory, SIZES[-1], 100)
            drain = await journal_drain(directory, drain_size)
        costs = {size: c for size, c in best.items() if c is not None}
        return QueueFigures(costs, burst, *drain)

    return asyncio.run(run())


def case(report: Report, rounds: int, load_rounds: int) -> None:
    """Settle journal add/remove at 10k entries vs at 10, loop stalls, a drain."""
    ops, drain = (50, 2_000) if rounds < 100 else (300, 10_000)
    q = measure(ops, drain, load_rounds)
    for size in SIZES:
        costs = q.costs[size]
        print(
            f"  journal at {size:>6,} entries: add {costs.add_ms:9.3f} ms  remove "
            f"{costs.remove_ms:9.3f} ms  loop stall {costs.stall_ms:9.3f} ms  loop CPU "
            f"{costs.loop_cpu_us:8.1f} µs/op",
            flush=True,
        )
        report.rows.append({"case": f"settle journal, {size} entries", **vars(costs)})
    print(
        f"  journal: 100 adds at once {q.burst_us:.0f} µs each; draining {drain:,} entries "
        f"{q.drain_ms:.3f} ms per remove (longest loop stall {q.drain_stall_ms:.1f} ms, "
        f"{q.drain_lines} lines left)",
        flush=True,
    )
    report.rows.append(
        {
            "case": f"settle journal drain, {drain} entries",
            "burst_add_us": q.burst_us,
            "remove_ms": q.drain_ms,
            "stall_ms": q.drain_stall_ms,
        }
    )
    big, small = q.costs[SIZES[-1]], q.costs[SIZES[0]]
    for op in ("add", "remove"):
        at_big, at_small = getattr(big, f"{op}_ms"), getattr(small, f"{op}_ms")
        report.figure(
            Figure(f"journal {op} at 10k (ms) [/ at 10]", at_big, at_small, "", at_big, "ms"),
            Target("abs<=", 1.0),
        )
        report.figure(Figure(f"journal {op} at 10k / at 10", at_big, at_small), Target("<=", 1.5))
    report.figure(
        Figure(
            "longest loop stall at 10k (ms) [/ at 10]",
            big.stall_ms,
            small.stall_ms,
            absolute=big.stall_ms,
            unit="ms",
        )
    )
    report.figure(
        Figure(
            f"journal remove while draining {drain // 1000}k (ms) [/ remove at 10]",
            q.drain_ms,
            small.remove_ms,
            absolute=q.drain_ms,
            unit="ms",
        ),
        Target("abs<=", 1.0),
    )
