"""Settles the service could not take (an outage after the answer was delivered), kept on disk.

Each entry is what a retry needs: the envelope, the access token, the amount and the
``agentRequestId`` (settle is idempotent on it, so a retry never burns twice). The file lives
under the plugin's config directory with mode 0600, like the credential file, because it holds
access tokens; it is rewritten atomically, so a crash leaves the old or the new list, never half
of one. A second run of the endpoint reads it and finishes what the first left.

:class:`SettleQueue` is the synchronous whole-file store the flow used first; the append-only,
locked :class:`~.settle_journal.SettleJournal` replaces it (and reads its file once).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ...redact import get_logger

log = get_logger("svc_gateway.paid")

QUEUE_FILE = "settle-queue.json"
#: entries kept at most; beyond it the oldest are dropped (and logged), so the file stays small
MAX_ENTRIES = 10_000
#: an access token older than this has expired anyway: its settle can no longer succeed
MAX_AGE_SECS = 7 * 24 * 3600.0

Fsync = Callable[[int], None]


def os_fsync(fd: int) -> None:
    os.fsync(fd)  # looked up at call time, so a test can observe it


def fsync_directory(directory: Path, fsync: Fsync = os_fsync) -> None:
    """Make a rename or a new file in ``directory`` durable (POSIX: sync the directory)."""
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        fsync(fd)
    finally:
        os.close(fd)


def replace_durably(path: Path, data: bytes, fsync: Fsync = os_fsync) -> None:
    """Write ``data`` to a 0600 temp file, sync it, rename it over ``path``, sync the
    directory: after a crash or a power loss ``path`` holds the old or the new bytes."""
    tmp = path.with_name(path.name + ".tmp")
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_directory(path.parent, fsync)


def set_aside(path: Path, fsync: Fsync = os_fsync) -> bool:
    """Rename an unreadable file to ``<name>.bad`` (kept for a human); False if it cannot be."""
    try:
        os.replace(path, path.with_name(path.name + ".bad"))
        fsync_directory(path.parent, fsync)
    except OSError:
        return False
    return True


@dataclass(frozen=True)
class PendingSettle:
    """One settle to retry. ``repr`` leaves the token out."""

    request_id: str
    plan_id: str
    payer: str | None
    amount: int
    token: str
    envelope: dict[str, Any]
    queued_at: float

    def __repr__(self) -> str:
        return (
            f"PendingSettle(request_id={self.request_id!r}, plan_id={self.plan_id!r}, "
            f"payer={self.payer!r}, amount={self.amount})"
        )

    @classmethod
    def from_json(cls, data: object) -> PendingSettle | None:
        if not isinstance(data, dict):
            return None
        try:
            entry = cls(
                request_id=str(data["request_id"]),
                plan_id=str(data["plan_id"]),
                payer=None if data.get("payer") is None else str(data["payer"]),
                amount=int(data["amount"]),
                token=str(data["token"]),
                envelope=dict(data["envelope"]),
                queued_at=float(data["queued_at"]),
            )
        except (KeyError, TypeError, ValueError):
            return None
        return entry if entry.request_id and entry.token and entry.amount > 0 else None


def log_dropped(entry: PendingSettle, why: str) -> None:
    """Log a settle given up (its credits will never be burned), without its token."""
    log.error(
        "dropped the unsettled request %s (payer %s, plan %s, %d credits): %s",
        entry.request_id,
        entry.payer or "unknown",
        entry.plan_id,
        entry.amount,
        why,
    )


class SettleQueue:
    """An ordered, persistent map ``agentRequestId`` → :class:`PendingSettle`."""

    def __init__(
        self,
        path: Path,
        *,
        max_entries: int = MAX_ENTRIES,
        max_age_secs: float = MAX_AGE_SECS,
        clock: Any = time.time,
        fsync: Fsync = os_fsync,
    ) -> None:
        self.path = path
        self._fsync = fsync
        self.max_entries = max_entries
        self.max_age_secs = max_age_secs
        self._clock = clock
        self._entries: dict[str, PendingSettle] = {}
        self.dropped = 0
        self._load()

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"SettleQueue(path={str(self.path)!r}, pending={len(self)})"

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._entries

    def entries(self) -> list[PendingSettle]:
        return list(self._entries.values())

    def add(self, entry: PendingSettle) -> None:
        self._entries[entry.request_id] = entry
        while len(self._entries) > self.max_entries:
            oldest = next(iter(self._entries))
            self._drop(oldest, "the settle queue is full")
        self._save()

    def remove(self, request_id: str) -> None:
        if self._entries.pop(request_id, None) is not None:
            self._save()

    def _drop(self, request_id: str, why: str) -> None:
        self.dropped += 1
        log_dropped(self._entries.pop(request_id), why)

    def _load(self) -> None:
        try:
            raw = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return
        except OSError as exc:
            log.error("cannot read the settle queue %s (%s)", self.path, exc.strerror or exc)
            return
        try:
            items = json.loads(raw)
        except ValueError:
            items = None
        if not isinstance(items, list):
            log.error("the settle queue %s is unreadable; it is kept aside as .bad", self.path)
            self._set_aside()
            return
        for item in items:
            entry = PendingSettle.from_json(item)
            if entry is None:
                self.dropped += 1
                log.error("skipped an unreadable entry of the settle queue %s", self.path)
                continue
            self._entries[entry.request_id] = entry
        now = self._clock()
        for entry in self.entries():
            if now - entry.queued_at > self.max_age_secs:
                self._drop(entry.request_id, "too old to settle (its access token has expired)")

    def _set_aside(self) -> None:
        set_aside(self.path, self._fsync)

    def _save(self) -> None:
        """Write the whole list atomically, mode 0600 (it holds access tokens)."""
        data = json.dumps([asdict(e) for e in self._entries.values()], separators=(",", ":"))
        try:
            replace_durably(self.path, data.encode("utf-8"), self._fsync)
        except OSError as exc:
            log.error(
                "cannot write the settle queue %s (%s); %d unsettled request(s) are kept in "
                "memory only",
                self.path,
                exc.strerror or exc,
                len(self._entries),
            )
