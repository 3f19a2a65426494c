"""One settle queue file, one owner: a second store (in this process or another) refuses to
start and says what to do; the lock goes with ``aclose`` and with the owner's death."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import svc_gateway
from svc_gateway.selling.state.settle_journal import SettleJournal, SettleQueueLocked
from svc_gateway.selling.state.settle_queue import PendingSettle

OWNER = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from svc_gateway.selling.state.settle_journal import SettleJournal
    from svc_gateway.selling.state.settle_queue import PendingSettle

    async def main() -> None:
        store = await SettleJournal.open(Path(sys.argv[1]))
        await store.add(PendingSettle("req-child", "plan-1", None, 1, "tok", {}, 9e9))
        print("holding", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        await store.aclose()
        print("closed", flush=True)
        await asyncio.to_thread(sys.stdin.readline)  # still alive, lock released

    asyncio.run(main())
    """
)


@pytest.fixture
def owner(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holding ``tmp_path/settle-queue.json``."""
    env = {**os.environ, "PYTHONPATH": str(Path(svc_gateway.__file__).parent.parent)}
    child = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(tmp_path / "settle-queue.json")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert child.stdout is not None and child.stdout.readline() == "holding\n"
    yield child
    child.kill()
    child.wait(10)


def refusal(path: Path) -> str:
    with pytest.raises(SettleQueueLocked) as raised:
        SettleJournal(path)
    return str(raised.value)


def test_a_second_store_in_another_process_refuses_to_start_and_says_what_to_do(
    owner: subprocess.Popen[str], tmp_path: Path
) -> None:
    path = tmp_path / "settle-queue.json"
    message = refusal(path)
    assert message == (
        f"the settle queue {path} is already in use by process {owner.pid}; two endpoints must "
        "not share one queue file (settles would be lost). Give each endpoint its own "
        "settleQueuePath, or stop the other one; replicas of one seller share their state "
        "with stateUrl instead"
    )
    assert path.read_text().count("req-child") == 1  # the owner's journal untouched
    other = SettleJournal(tmp_path / "settle-queue-2.json")  # its own file: no conflict
    other.close()


def test_the_lock_is_released_when_the_owner_closes_the_store(
    owner: subprocess.Popen[str], tmp_path: Path
) -> None:
    assert owner.stdin is not None and owner.stdout is not None
    refusal(tmp_path / "settle-queue.json")
    owner.stdin.write("\n")
    owner.stdin.flush()
    assert owner.stdout.readline() == "closed\n"
    assert owner.poll() is None  # alive: released by aclose, not by dying
    store = SettleJournal(tmp_path / "settle-queue.json", clock=lambda: 0.0)
    try:
        assert len(store) == 1 and "req-child" in store  # and its entry is there
    finally:
        store.close()


def test_the_lock_is_released_when_the_owner_is_killed(
    owner: subprocess.Popen[str], tmp_path: Path
) -> None:
    refusal(tmp_path / "settle-queue.json")
    owner.send_signal(signal.SIGKILL)
    owner.wait(10)
    store = SettleJournal(tmp_path / "settle-queue.json", clock=lambda: 0.0)
    store.close()


async def test_a_second_store_in_the_same_process_is_refused_until_the_first_closes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "svc" / "settle-queue.json"
    first = await SettleJournal.open(path)
    await first.add(PendingSettle("req-1", "plan-1", None, 1, "tok", {}, 9e9))
    message = refusal(path)
    assert f"the settle queue {path} is already in use by process {os.getpid()};" in message
    assert [e.request_id for e in await first.entries()] == ["req-1"]  # the owner unharmed
    await first.aclose()
    second = await SettleJournal.open(path)
    try:
        assert [e.request_id for e in await second.entries()] == ["req-1"]
    finally:
        await second.aclose()
