"""The settle queue as an append-only, fsynced, exclusively locked journal, written off the loop.

One JSON line per change: ``{"add": {...entry...}}`` or ``{"remove": "<agentRequestId>"}``.
A single writer thread appends the lines and fsyncs them (group commit: every line waiting
when the thread wakes shares one ``fsync``); ``add``/``remove`` return once their line is on
disk, and the event loop never waits for the disk. When removals dominate, the writer rewrites
the live entries to a temp file, syncs it, renames it over the journal and syncs the directory.
A torn last line (a crash mid-append) is ignored. The previous format (one JSON array) is read
once and rewritten as a journal, so an upgrade loses nothing.

The file holds access tokens: 0600 in a 0700 directory. ``<name>.lock`` beside it is held with
``flock`` for the store's life, so a second endpoint on the same file refuses to start (two
writers would lose settles); the kernel releases it when the process dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import itertools
import json
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...config import ConfigError
from ...redact import get_logger
from .settle_queue import (
    MAX_AGE_SECS,
    MAX_ENTRIES,
    Fsync,
    PendingSettle,
    fsync_directory,
    log_dropped,
    os_fsync,
    replace_durably,
    set_aside,
)

if TYPE_CHECKING:
    from ...service.seller import SellerSettings
    from .protocols import SettleStore

log = get_logger("svc_gateway.paid")

#: compact once the journal holds this many dead lines and more dead lines than live ones
COMPACT_MIN_DEAD = 256


class SettleQueueLocked(ConfigError):
    """Another store (endpoint, process) holds this queue file."""


def default_queue_path(settings: SellerSettings) -> Path:
    """The seller's settle file (``settleQueuePath``, else ``settle-queue.json`` beside the
    account's credential file)."""
    if settings.queue_path is None:
        raise ConfigError("this seller names no settle queue file: set settleQueuePath")
    return settings.queue_path


def _line(record: dict[str, Any]) -> bytes:
    return (json.dumps(record, separators=(",", ":")) + "\n").encode("utf-8")


class _Writer:
    """The writer thread's side: its own view of the file (live lines, line count)."""

    def __init__(self, path: Path, lines: dict[str, bytes], records: int, fsync: Fsync) -> None:
        self.path = path
        self.lines = lines
        self.records = records
        self.fsync = fsync
        self.fd: int | None = None
        self.dirty = False  # a write failed: the file may miss lines, so rewrite it whole

    def open(self) -> None:
        created = not self.path.exists()
        self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        if created:
            fsync_directory(self.path.parent, self.fsync)  # the new name itself must last

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def apply(self, request_id: str, line: bytes, adding: bool) -> None:
        if adding:
            self.lines[request_id] = line  # re-added: replaced where it stands
        else:
            self.lines.pop(request_id, None)
        self.records += 1

    def append(self, data: bytes) -> None:
        if self.dirty or self.fd is None:
            self.compact()
            return
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view) :]
        self.fsync(self.fd)

    def should_compact(self) -> bool:
        dead = self.records - len(self.lines)
        return dead >= COMPACT_MIN_DEAD and dead > len(self.lines)

    def compact(self) -> None:
        self.close()
        replace_durably(self.path, b"".join(self.lines.values()), self.fsync)
        self.records = len(self.lines)
        self.dirty = False
        self.open()


_Job = tuple[str, bytes, bool, "asyncio.Future[None]"]


class SettleJournal:
    """An ordered, persistent, exclusive map ``agentRequestId`` → :class:`PendingSettle`
    (the ``SettleStore`` of one process). Open it with ``await SettleJournal.open(path)``
    (the constructor reads the file and takes the lock: it blocks) and ``await aclose()``."""

    def __init__(
        self,
        path: Path,
        *,
        max_entries: int = MAX_ENTRIES,
        max_age_secs: float = MAX_AGE_SECS,
        clock: Callable[[], float] = time.time,
        fsync: Fsync = os_fsync,
    ) -> None:
        self.path = path
        self.lock_path = path.with_name(path.name + ".lock")
        self.max_entries = max_entries
        self.max_age_secs = max_age_secs
        self.dropped = 0
        self._clock = clock
        self._fsync = fsync
        self._entries: dict[str, PendingSettle] = {}
        self._closed = False
        try:
            self._lock_fd = self._take_lock()
        except OSError as exc:
            raise self._unusable(exc) from None
        try:
            writer = self._load()
        except BaseException as exc:
            os.close(self._lock_fd)
            if isinstance(exc, OSError):
                raise self._unusable(exc) from None
            raise
        self._writer = writer
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(
            target=self._run, name=f"svc-settle-journal:{path.name}", daemon=True
        )
        self._thread.start()

    @classmethod
    async def open(cls, path: Path, **options: Any) -> SettleJournal:
        """Lock and read the journal on a worker thread, not on the event loop."""
        return await asyncio.to_thread(lambda: cls(path, **options))

    def __repr__(self) -> str:
        return f"SettleJournal(path={str(self.path)!r}, pending={len(self._entries)})"

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._entries

    # -- SettleStore --------------------------------------------------------------------------

    async def add(self, entry: PendingSettle) -> list[str]:
        """Keep ``entry`` (an entry with the same id is replaced where it stands, as old as it
        was); returns once it is on disk, with
        the request ids dropped (oldest first, logged) to stay within ``max_entries``."""
        self._check_open()
        self._entries[entry.request_id] = entry
        waits = [self._submit(entry.request_id, _line({"add": asdict(entry)}), True)]
        evicted: list[str] = []
        while len(self._entries) > self.max_entries:
            oldest = next(iter(self._entries))
            self._drop(oldest, "the settle queue is full")
            evicted.append(oldest)
            waits.append(self._submit(oldest, _line({"remove": oldest}), False))
        await asyncio.gather(*waits)
        return evicted

    async def remove(self, request_id: str) -> None:
        """Forget a settle (done or given up); an unknown id writes nothing."""
        self._check_open()
        if self._entries.pop(request_id, None) is not None:
            await self._submit(request_id, _line({"remove": request_id}), False)

    async def claim(self, limit: int = 100) -> list[PendingSettle]:
        """The oldest ``limit`` entries. One process owns this file (the lock), and the flow
        runs one drain at a time, so no lease is needed: an entry stays until removed."""
        return list(itertools.islice(self._entries.values(), max(limit, 0)))

    async def entries(self) -> list[PendingSettle]:
        return list(self._entries.values())

    async def count(self) -> int:
        return len(self._entries)

    async def aclose(self) -> None:
        """Write what is pending, stop the writer, release the lock. Idempotent."""
        if self._closed:
            return
        try:
            await asyncio.to_thread(self.close)
        except RuntimeError:  # the loop's executor is shut down (a host's exit): close here
            self.close()

    def close(self) -> None:
        """Blocking :meth:`aclose`, for code outside an event loop."""
        if self._closed:
            return
        self._closed = True
        self._jobs.put(None)
        self._thread.join()
        self._writer.close()
        os.close(self._lock_fd)

    def _unusable(self, exc: OSError) -> ConfigError:
        return ConfigError(
            f"cannot open the settle queue {self.path} ({exc.strerror or exc}); set "
            "settleQueuePath to a file in a directory this process can write"
        )

    # -- the lock -----------------------------------------------------------------------------

    def _take_lock(self) -> int:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            os.close(fd)
            raise SettleQueueLocked(
                f"the settle queue {self.path} is already in use"
                + (f" by process {holder}" if holder.isdigit() else "")
                + "; two endpoints must not share one queue file (settles would be lost). "
                "Give each endpoint its own settleQueuePath, or stop the other one; replicas "
                "of one seller share their state with stateUrl instead"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        return fd

    # -- reading the file ---------------------------------------------------------------------

    def _load(self) -> _Writer:
        """Read the journal (or the old array), drop what is too old, rewrite it when it is
        not clean, and return the writer's view of it."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            raw = b""
        lines: dict[str, bytes] = {}
        clean = True
        records = 0
        if raw.lstrip()[:1] == b"[":
            clean = False  # the old format: rewritten as a journal below
            items = self._read_array(raw)
            for item in items or []:
                self._keep(PendingSettle.from_json(item), lines)
        elif raw.strip():
            records, clean = self._read_journal(raw, lines)
        now = self._clock()
        for entry in list(self._entries.values()):
            if now - entry.queued_at > self.max_age_secs:
                self._drop(entry.request_id, "too old to settle (its access token has expired)")
                lines.pop(entry.request_id, None)
                clean = False
        writer = _Writer(self.path, lines, records, self._fsync)
        if (self.path.exists() and not clean) or writer.should_compact():
            writer.compact()
        else:
            writer.open()
        return writer

    def _read_array(self, raw: bytes) -> list[Any] | None:
        try:
            items = json.loads(raw)
        except ValueError:
            items = None
        if not isinstance(items, list):
            self._unreadable()
            return None
        return items

    def _read_journal(self, raw: bytes, lines: dict[str, bytes]) -> tuple[int, bool]:
        chunks = raw.split(b"\n")
        torn = chunks.pop()  # after the last newline: empty, or a line a crash cut short
        clean = not torn
        if torn:
            log.warning("ignored the unfinished last line of the settle queue %s", self.path)
        good = 0
        for chunk in chunks:
            record = self._parse(chunk)
            if record is None:
                clean = False
                if chunk.strip():
                    self.dropped += 1
                    log.error("skipped an unreadable line of the settle queue %s", self.path)
                continue
            good += 1
            if "remove" in record:
                request_id = str(record["remove"])
                self._entries.pop(request_id, None)
                lines.pop(request_id, None)
            else:
                self._keep(PendingSettle.from_json(record.get("add")), lines)
        if not good:  # not one whole line of a journal: not ours to overwrite
            self._unreadable()
            return 0, True
        return len(chunks), clean

    @staticmethod
    def _parse(chunk: bytes) -> dict[str, Any] | None:
        try:
            record = json.loads(chunk)
        except ValueError:
            return None
        if isinstance(record, dict) and ("add" in record or "remove" in record):
            return record
        return None

    def _keep(self, entry: PendingSettle | None, lines: dict[str, bytes]) -> None:
        if entry is None:
            self.dropped += 1
            log.error("skipped an unreadable entry of the settle queue %s", self.path)
            return
        self._entries[entry.request_id] = entry  # a later line replaces it where it stands
        lines[entry.request_id] = _line({"add": asdict(entry)})

    def _unreadable(self) -> None:
        if set_aside(self.path, self._fsync):
            log.error("the settle queue %s is unreadable; it is kept aside as .bad", self.path)
            return
        raise ConfigError(
            f"the settle queue {self.path} is unreadable and cannot be moved aside; move it "
            "away (or fix it) and start again"
        )

    def _drop(self, request_id: str, why: str) -> None:
        self.dropped += 1
        log_dropped(self._entries.pop(request_id), why)

    # -- the writer thread --------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"the settle queue {self.path} is closed")

    def _submit(self, request_id: str, line: bytes, adding: bool) -> asyncio.Future[None]:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._jobs.put((request_id, line, adding, done))
        return done

    def _run(self) -> None:
        stop = False
        while not stop:
            batch = [self._jobs.get()]
            with contextlib.suppress(queue.Empty):
                while True:
                    batch.append(self._jobs.get_nowait())
            jobs = [job for job in batch if job is not None]
            stop = len(jobs) < len(batch)
            if jobs:
                self._write(jobs)

    def _write(self, jobs: list[_Job]) -> None:
        writer = self._writer
        for request_id, line, adding, _ in jobs:
            writer.apply(request_id, line, adding)
        try:
            writer.append(b"".join(line for _, line, _, _ in jobs))
            if writer.should_compact():
                writer.compact()
        except Exception as exc:  # the thread must live on: every waiter gets its answer
            writer.dirty = True
            log.error(
                "cannot write the settle queue %s (%s); %d unsettled request(s) are kept in "
                "memory only until a write succeeds",
                self.path,
                getattr(exc, "strerror", None) or type(exc).__name__,
                len(writer.lines),
            )
        for *_, done in jobs:
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits
                done.get_loop().call_soon_threadsafe(_finish, done)


def _finish(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)


if TYPE_CHECKING:
    _conforms: type[SettleStore] = SettleJournal
