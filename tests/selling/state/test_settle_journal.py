"""The settle queue's journal: every field survives a restart, one line per change written by
its own thread, group commit, compaction, a torn last line, the old file format, full and old
entries, unreadable files and failed writes."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from svc_gateway.config import ConfigError
from svc_gateway.selling.state import settle_journal
from svc_gateway.selling.state.protocols import SettleStore
from svc_gateway.selling.state.settle_journal import SettleJournal
from svc_gateway.selling.state.settle_queue import PendingSettle
from tests.support import LogCollector

PAYER = "0x" + "aa" * 20
NOW = 1000.0
Opener = Callable[..., SettleJournal]


def entry(n: int, queued_at: float = NOW, amount: int = 1) -> PendingSettle:
    envelope = {"x402Version": 2, "accepts": [{"planId": "plan-1", "n": n}]}
    return PendingSettle(f"req-{n}", "plan-1", PAYER, amount, f"tok-{n}", envelope, queued_at)


@pytest.fixture
async def journal(tmp_path: Path) -> AsyncIterator[Opener]:
    """Open journals (on ``tmp_path/svc/settle-queue.json`` unless told); close them all."""
    opened: list[SettleJournal] = []

    def open_(path: Path | None = None, **options: Any) -> SettleJournal:
        options.setdefault("clock", lambda: NOW)
        store = SettleJournal(path or tmp_path / "svc" / "settle-queue.json", **options)
        opened.append(store)
        return store

    yield open_
    for store in opened:
        await store.aclose()


def write_old_array(path: Path, *entries: PendingSettle) -> list[dict[str, Any]]:
    """Write ``entries`` in the previous format, byte for byte as the old whole-file store
    saved it (one compact JSON array, 0600, in a 0700 directory); return the array."""
    array = [asdict(e) for e in entries]
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.write_text(json.dumps(array, separators=(",", ":")), encoding="utf-8")
    path.chmod(0o600)
    return array


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_a_reopened_journal_gives_back_every_field_and_the_original_request_id(
    journal: Opener,
) -> None:
    store = journal()
    kept = PendingSettle("agent-req-7f3", "plan-9", None, 3, "tok-x", {"a": [1, {"b": "c"}]}, 999.5)
    await store.add(kept)
    await store.add(entry(2))
    await store.aclose()
    again = journal()
    assert await again.entries() == [kept, entry(2)]  # every field, in order
    assert (await again.claim(1))[0].request_id == "agent-req-7f3"  # retried on its own id
    assert "tok-x" not in repr(await again.entries()) and "pending=2" in repr(again)


async def test_each_change_appends_one_line_and_removing_an_unknown_id_writes_nothing(
    journal: Opener,
) -> None:
    store = journal()
    await store.add(entry(1))
    await store.add(entry(2))
    await store.remove("req-1")
    await store.remove("never-queued")
    assert [next(iter(r)) for r in lines(store.path)] == ["add", "add", "remove"]
    assert lines(store.path)[2] == {"remove": "req-1"}
    assert await store.count() == 1 and len(store) == 1
    assert "req-2" in store and "req-1" not in store


async def test_claim_gives_the_oldest_entries_first_up_to_the_limit(journal: Opener) -> None:
    store = journal()
    for n in range(5):
        await store.add(entry(n))
    assert [e.request_id for e in await store.claim(3)] == ["req-0", "req-1", "req-2"]
    assert len(await store.claim()) == 5 and await store.claim(0) == []
    await store.add(entry(0, amount=2))  # queued again: replaced where it stands
    assert [e.request_id for e in await store.claim(2)] == ["req-0", "req-1"]
    await store.aclose()
    again = await journal().claim(2)  # the replay of the journal agrees
    assert [e.request_id for e in again] == ["req-0", "req-1"] and again[0].amount == 2


async def test_the_disk_is_written_by_one_thread_off_the_event_loop(journal: Opener) -> None:
    writers: set[str] = set()

    def fsync(fd: int) -> None:
        writers.add(threading.current_thread().name)
        os.fsync(fd)

    store = journal(fsync=fsync)
    writers.clear()  # opening blocks (SettleJournal.open runs it on a worker thread)
    await store.add(entry(1))
    await store.remove("req-1")
    assert writers == {"svc-settle-journal:settle-queue.json"}


async def test_add_returns_only_once_its_line_is_synced_and_waiting_lines_share_one_fsync(
    journal: Opener,
) -> None:
    gate = threading.Event()
    synced: list[int] = []

    def fsync(fd: int) -> None:
        gate.wait(10)
        synced.append(os.fstat(fd).st_size)
        os.fsync(fd)

    gate.set()
    store = journal(fsync=fsync)
    gate.clear()
    synced.clear()
    first = asyncio.ensure_future(store.add(entry(0)))
    await asyncio.sleep(0.05)
    rest = [asyncio.ensure_future(store.add(entry(n))) for n in range(1, 50)]
    await asyncio.sleep(0.05)
    assert not first.done()  # its line is written but not yet synced
    gate.set()
    await asyncio.gather(first, *rest)
    assert len(synced) <= 3  # the 49 lines queued behind the first share (about) one fsync
    assert len(lines(store.path)) == 50


async def test_a_torn_last_line_is_ignored_and_the_journal_rewritten_whole(
    journal: Opener, all_logs: LogCollector
) -> None:
    store = journal()
    await store.add(entry(1))
    await store.add(entry(2))
    await store.aclose()
    with store.path.open("ab") as out:
        out.write(b'{"add":{"request_id":"req-3","plan_id":"pl')  # a crash mid-append
    again = journal()
    assert [e.request_id for e in await again.entries()] == ["req-1", "req-2"]
    assert "ignored the unfinished last line" in all_logs.text
    assert store.path.read_bytes().endswith(b"\n")  # the next line is not glued to the torn one
    await again.add(entry(4))
    await again.aclose()
    assert [e.request_id for e in await journal().entries()] == ["req-1", "req-2", "req-4"]


async def test_an_unreadable_line_is_skipped_the_others_kept(
    journal: Opener, tmp_path: Path, all_logs: LogCollector
) -> None:
    path = tmp_path / "settle-queue.json"
    good = [json.dumps({"add": asdict(entry(n))}) for n in (1, 5)]
    half = json.dumps({"add": {"request_id": "req-2"}})
    path.write_text("\n".join([good[0], "not json", half, "", "[]", good[1]]) + "\n")
    store = journal(path)
    assert [e.request_id for e in await store.entries()] == ["req-1", "req-5"]
    assert store.dropped == 3
    assert "skipped an unreadable line of the settle queue" in all_logs.text
    assert "skipped an unreadable entry of the settle queue" in all_logs.text
    assert [r["add"]["request_id"] for r in lines(path)] == ["req-1", "req-5"]  # rewritten


async def test_removals_dominating_compact_the_journal_and_keep_the_live_entries_in_order(
    journal: Opener,
) -> None:
    store = journal()
    for n in range(600):
        await store.add(entry(n))
    for n in range(0, 600, 2):
        await store.remove(f"req-{n}")
    for n in range(1, 400, 2):
        await store.remove(f"req-{n}")  # 500 removed, 100 live: compacted on the way
    assert len(lines(store.path)) < 600  # 1,100 lines without compaction
    assert all("add" in r for r in lines(store.path)[:100])
    await store.aclose()
    reopened = await journal().entries()
    assert [e.request_id for e in reopened] == [f"req-{n}" for n in range(401, 600, 2)]


async def test_the_journal_meets_the_settle_store_contract(journal: Opener) -> None:
    store: SettleStore = journal(max_entries=2)
    assert await store.add(entry(1)) == [] and await store.add(entry(2)) == []
    assert await store.add(entry(2, amount=2)) == []  # the same request: replaced, none evicted
    assert await store.add(entry(3)) == ["req-1"]
    assert [e.request_id for e in await store.entries()] == ["req-2", "req-3"]
    assert [e.request_id for e in await store.claim(1)] == ["req-2"]  # oldest first
    assert await store.count() == 2
    await store.remove("req-2")
    assert [e.request_id for e in await store.claim()] == ["req-3"]
    await store.aclose()
    assert "pending=1" in repr(store) and "tok" not in repr(store)


async def test_a_full_queue_drops_the_oldest_and_says_so(
    journal: Opener, all_logs: LogCollector
) -> None:
    store = journal(max_entries=2)
    assert await store.add(entry(0)) == [] and await store.add(entry(1)) == []
    assert await store.add(entry(2)) == ["req-0"]  # the flow releases what will not be paid
    assert [e.request_id for e in await store.entries()] == ["req-1", "req-2"]
    assert store.dropped == 1
    assert "dropped the unsettled request req-0 (payer 0x" in all_logs.text
    assert "1 credits): the settle queue is full" in all_logs.text
    await store.aclose()
    assert [e.request_id for e in await journal().entries()] == ["req-1", "req-2"]


async def test_entries_too_old_to_settle_are_dropped_at_open(
    journal: Opener, all_logs: LogCollector
) -> None:
    store = journal()
    await store.add(entry(1, queued_at=0.0))
    await store.add(entry(2, queued_at=NOW))
    await store.aclose()
    later = journal(max_age_secs=60.0, clock=lambda: NOW + 30.0)
    assert [e.request_id for e in await later.entries()] == ["req-2"] and later.dropped == 1
    assert "too old to settle (its access token has expired)" in all_logs.text
    await later.aclose()
    assert [r["add"]["request_id"] for r in lines(store.path)] == ["req-2"]  # rewritten


async def test_the_files_are_private(journal: Opener) -> None:
    store = journal()
    await store.add(entry(1))
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600  # it holds access tokens
    assert stat.S_IMODE(store.lock_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(store.path.parent.stat().st_mode) == 0o700


async def test_the_old_array_file_is_read_once_and_rewritten_as_a_journal(
    journal: Opener, tmp_path: Path, all_logs: LogCollector
) -> None:
    path = tmp_path / "svc" / "settle-queue.json"
    anonymous = PendingSettle("req-2", "plan-2", None, 2, "tok-2", {}, NOW)
    array = write_old_array(path, entry(1, amount=3), anonymous)
    path.write_text(json.dumps([*array, {"request_id": "half"}]))
    store = journal(path)
    assert await store.entries() == [entry(1, amount=3), anonymous]
    assert "skipped an unreadable entry" in all_logs.text
    assert [r["add"]["request_id"] for r in lines(path)] == ["req-1", "req-2"]  # migrated
    await store.remove("req-1")
    await store.aclose()
    assert [e.request_id for e in await journal(path).entries()] == ["req-2"]


@pytest.mark.parametrize("content", [b"{not json", b"[1, 2", b"\x00\x01garbage\n", b"{}\n[]\n"])
async def test_an_unreadable_file_is_set_aside_as_bad_and_the_queue_starts_empty(
    journal: Opener, tmp_path: Path, content: bytes, all_logs: LogCollector
) -> None:
    path = tmp_path / "settle-queue.json"
    path.write_bytes(content)
    store = journal(path)
    assert await store.count() == 0
    assert path.with_name("settle-queue.json.bad").read_bytes() == content  # kept for a human
    assert "is unreadable; it is kept aside as .bad" in all_logs.text
    await store.add(entry(1))
    await store.aclose()
    assert [e.request_id for e in await journal(path).entries()] == ["req-1"]


def test_an_unreadable_file_that_cannot_be_set_aside_stops_the_start(tmp_path: Path) -> None:
    path = tmp_path / "settle-queue.json"
    path.write_text("{not json")
    blocker = path.with_name("settle-queue.json.bad")
    blocker.mkdir()
    (blocker / "keep").write_text("x")  # a non-empty directory: the rename fails
    with pytest.raises(ConfigError) as raised:
        SettleJournal(path)
    assert "cannot be moved aside; move it away" in str(raised.value)
    assert path.read_text() == "{not json"  # nothing overwritten
    SettleJournal(path.with_name("other.json")).close()  # and the failed one left no lock
    path.unlink()
    SettleJournal(path).close()


async def test_a_failed_write_keeps_the_entry_and_the_next_write_rewrites_everything(
    journal: Opener, all_logs: LogCollector
) -> None:
    failures: list[OSError] = []

    def fsync(fd: int) -> None:
        if failures:
            raise failures.pop()
        os.fsync(fd)

    store = journal(fsync=fsync)
    failures.append(OSError(28, "No space left on device"))
    await store.add(entry(1))  # its line may not be on disk
    assert "cannot write the settle queue" in all_logs.text
    assert "No space left on device" in all_logs.text and "tok-1" not in all_logs.text
    assert await store.count() == 1  # kept in memory
    await store.add(entry(2))
    await store.aclose()
    assert [e.request_id for e in await journal().entries()] == ["req-1", "req-2"]


async def test_a_closed_journal_refuses_changes_and_closing_twice_is_harmless(
    journal: Opener,
) -> None:
    store = journal()
    await store.aclose()
    await store.aclose()
    store.close()
    with pytest.raises(RuntimeError, match="is closed"):
        await store.add(entry(1))
    with pytest.raises(RuntimeError, match="is closed"):
        await store.remove("req-1")


async def test_open_reads_and_migrates_the_file_off_the_loop(tmp_path: Path) -> None:
    path = tmp_path / "settle-queue.json"
    write_old_array(path, entry(1))  # the old format: rewritten at open
    threads: set[threading.Thread] = set()

    def fsync(fd: int) -> None:
        threads.add(threading.current_thread())
        os.fsync(fd)

    store = await SettleJournal.open(path, clock=lambda: NOW, fsync=fsync)
    try:
        assert [e.request_id for e in await store.entries()] == ["req-1"]
    finally:
        await store.aclose()
    assert threads and threading.current_thread() not in threads


def test_a_queue_that_cannot_be_created_stops_the_start_with_what_to_do(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigError) as raised:
        SettleJournal(blocker / "settle-queue.json")  # its directory is a file
    message = str(raised.value)
    assert message.startswith(f"cannot open the settle queue {blocker / 'settle-queue.json'} (")
    assert message.endswith(
        "); set settleQueuePath to a file in a directory this process can write"
    )


def test_a_queue_path_that_is_a_directory_stops_the_start(tmp_path: Path) -> None:
    path = tmp_path / "settle-queue.json"
    path.mkdir()
    with pytest.raises(ConfigError, match=r"cannot open the settle queue .*settleQueuePath"):
        SettleJournal(path)
    path.rmdir()
    SettleJournal(path).close()  # the failed start left no lock behind


def test_a_lock_the_filesystem_cannot_take_stops_the_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_locks(fd: int, operation: int) -> None:
        raise OSError(37, "No locks available")  # ENOLCK: e.g. some network filesystems

    monkeypatch.setattr(settle_journal.fcntl, "flock", no_locks)
    with pytest.raises(ConfigError, match=r"\(No locks available\); set settleQueuePath"):
        SettleJournal(tmp_path / "settle-queue.json")


async def test_an_add_whose_caller_gave_up_is_still_written(journal: Opener) -> None:
    gate = threading.Event()
    gate.set()

    def fsync(fd: int) -> None:
        gate.wait(10)
        os.fsync(fd)

    store = journal(fsync=fsync)
    gate.clear()
    waiting = asyncio.ensure_future(store.add(entry(1)))
    await asyncio.sleep(0.05)
    waiting.cancel()  # e.g. the request's task was cancelled
    gate.set()
    await store.aclose()
    assert [e.request_id for e in await journal().entries()] == ["req-1"]


async def test_closing_at_a_hosts_exit_still_writes_what_is_pending(journal: Opener) -> None:
    """A host closes the plugin from ``atexit`` (Hermes), when the loop's executor may already
    be shut down: the journal closes on the loop's own thread instead, and a pending removal
    is written, not lost (a restart would otherwise settle that request again)."""
    from concurrent.futures import ThreadPoolExecutor

    store = journal()
    await store.add(entry(1))
    await store.add(entry(2))
    await store.remove("req-1")  # queued for the writer, not waited for
    executor = ThreadPoolExecutor(1)
    asyncio.get_running_loop().set_default_executor(executor)
    executor.shutdown()
    await store.aclose()
    reopened = journal(store.path)  # opened on this thread (the executor is gone)
    assert [e.request_id for e in await reopened.entries()] == ["req-2"]
