"""The admission book's own CPU per paid request, Redis against in-process: ``python -m
benchmarks.book_cost``.

32 workers, each one payer, admit a credit, yield once (the work) and close the claim as
settled, on the Redis book (``stateUrl``: a throwaway local ``redis-server``) and on the
in-process book, in interleaved rounds; the CPU is this process's (``time.process_time``), this
process pinned to one CPU and ``redis-server`` to the other, as in the redis case. Each side's
best round (other tenants only ever add time) repeats to within a few microseconds where the
load runs of ``--only redis`` move by tens: it measures what the Redis book itself costs a
request (its scripts' packing, the batch, the replies, the futures), not aiohttp or the flow.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

from . import procs
from .own_work import extra_cost, show_rounds

WORKERS = 32
PLAN = "plan-book-cost"


@contextmanager
def pinned_redis() -> Iterator[str]:
    """A local ``redis-server`` on the second CPU, this process on the first (when 2+)."""
    split = procs.cpu_split()
    with procs.pinned(split[1] if split else None), procs.redis_server() as url:
        was = os.sched_getaffinity(0) if split else None
        if split:
            os.sched_setaffinity(0, split[0])
        try:
            yield url
        finally:
            if was is not None:
                os.sched_setaffinity(0, was)


async def measure(rounds: int, per_worker: int) -> dict[str, list[float]]:
    """Each side's CPU µs per admit + settle, one entry per round."""
    from svc_gateway.selling.state.book import Admission, CreditBook
    from svc_gateway.selling.state.redis_book import RedisAdmissionBook
    from svc_gateway.selling.state.redis_store import connect_client

    async def read(plan_id: str, payer: str) -> int:
        return 10**12

    with pinned_redis() as url:
        client = connect_client(url)
        shared = RedisAdmissionBook(
            client, read, where="bench", prefix="svc:bench:", claim_ttl_secs=60.0,
            owed_ttl_secs=600.0,
        )  # fmt: skip
        books = {"in-process": CreditBook(read), "redis": shared}

        async def worker(book: CreditBook | RedisAdmissionBook, n: int, i: int) -> None:
            payer = f"0x{i:040x}"
            for _ in range(n):
                claim = await book.admit(PLAN, payer, 1)
                assert isinstance(claim, Admission), claim
                await asyncio.sleep(0)  # the work
                await book.settled(claim, 1, None)

        async def run(book: CreditBook | RedisAdmissionBook, n: int) -> None:
            await asyncio.gather(*(worker(book, n, i) for i in range(WORKERS)))

        try:
            for book in books.values():  # warm: balance reads, scripts loaded
                await run(book, 20)
            spent: dict[str, list[float]] = {name: [] for name in books}
            for round_ in range(rounds):
                order = list(books.items())
                for name, book in order if round_ % 2 == 0 else order[::-1]:
                    start = time.process_time()
                    await run(book, per_worker)
                    spent[name].append((time.process_time() - start) / (WORKERS * per_worker) * 1e6)
        finally:
            await shared.aclose()
            await client.aclose()
    return spent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.book_cost")
    parser.add_argument("-n", type=int, default=100, help="admit + settle per worker a round")
    parser.add_argument("--rounds", type=int, default=11)
    args = parser.parse_args(argv)
    spent = asyncio.run(measure(args.rounds, args.n))
    show_rounds(spent, "per admit + settle")
    own, paired = extra_cost(spent, "redis", "in-process")
    print(
        f"  the Redis book's own cost: {own:.1f} µs a request over the in-process book's "
        f"(best rounds), {paired:.1f} (median of the rounds' differences)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
