"""Power-loss durability of the settle queue: every line is synced before ``add`` returns, and
every new name or rename is made durable by syncing the directory."""

from __future__ import annotations

import json
import os
import stat
from dataclasses import asdict
from pathlib import Path

import pytest

from svc_gateway.selling.state.settle_journal import SettleJournal
from svc_gateway.selling.state.settle_queue import PendingSettle

PAYER = "0x" + "aa" * 20


def entry(n: int) -> PendingSettle:
    return PendingSettle(f"req-{n}", "plan-1", PAYER, 1, f"tok-{n}", {"x402Version": 2}, 1000.0)


class Synced:
    """``os.fsync`` observed: which inode (file or directory) was synced, in order."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[int, bool]] = []
        real = os.fsync

        def fsync(fd: int) -> None:
            info = os.fstat(fd)
            self.calls.append((info.st_ino, stat.S_ISDIR(info.st_mode)))
            real(fd)

        monkeypatch.setattr(os, "fsync", fsync)

    def file(self, path: Path) -> int:
        """How many times the file now at ``path`` was synced."""
        return self.calls.count((path.stat().st_ino, False))

    def directory_after_file(self, path: Path) -> bool:
        """``path``'s directory was synced after the file now at ``path`` last was."""
        the_file = (path.stat().st_ino, False)
        the_directory = (path.parent.stat().st_ino, True)
        if the_file not in self.calls or the_directory not in self.calls:
            return False
        last_file = len(self.calls) - 1 - self.calls[::-1].index(the_file)
        return the_directory in self.calls[last_file + 1 :]


@pytest.fixture
def synced(monkeypatch: pytest.MonkeyPatch) -> Synced:
    return Synced(monkeypatch)


async def test_every_added_or_removed_line_is_synced_before_it_returns(
    tmp_path: Path, synced: Synced
) -> None:
    store = await SettleJournal.open(tmp_path / "settle-queue.json")
    try:
        await store.add(entry(1))
        assert synced.file(store.path) == 1
        await store.remove("req-1")
        assert synced.file(store.path) == 2
    finally:
        await store.aclose()


async def test_a_new_journal_file_is_made_durable_by_syncing_its_directory(
    tmp_path: Path, synced: Synced
) -> None:
    path = tmp_path / "settle-queue.json"
    store = await SettleJournal.open(path)
    await store.aclose()
    assert (path.parent.stat().st_ino, True) in synced.calls


async def test_compaction_syncs_the_new_file_then_the_directory(
    tmp_path: Path, synced: Synced, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("svc_gateway.selling.state.settle_journal.COMPACT_MIN_DEAD", 2)
    store = await SettleJournal.open(tmp_path / "settle-queue.json")
    try:
        for n in range(4):
            await store.add(entry(n))
        inode = store.path.stat().st_ino
        for n in range(2):  # 6 lines, 2 live: compacted once
            await store.remove(f"req-{n}")
        assert store.path.stat().st_ino != inode  # a new file renamed into place
        assert len(store.path.read_text().splitlines()) == 2
        assert synced.file(store.path) >= 1
        assert synced.directory_after_file(store.path)
    finally:
        await store.aclose()


async def test_migrating_the_old_file_syncs_the_new_one_then_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "settle-queue.json"
    # the previous format, as the old whole-file store wrote it: one compact JSON array
    path.write_text(json.dumps([asdict(entry(1))], separators=(",", ":")), encoding="utf-8")
    synced = Synced(monkeypatch)
    store = await SettleJournal.open(path)
    await store.aclose()
    assert synced.file(path) >= 1 and synced.directory_after_file(path)


def test_setting_aside_an_unreadable_file_syncs_the_directory(
    tmp_path: Path, synced: Synced
) -> None:
    path = tmp_path / "settle-queue.json"
    path.write_text("{not json")
    SettleJournal(path).close()
    assert path.with_name("settle-queue.json.bad").exists()
    # the rename aside, then the new journal's name
    assert synced.calls.count((tmp_path.stat().st_ino, True)) == 2
