"""What the settle stores share: a settle the service could not take (an outage after the
answer was delivered), kept to retry, and the durable-file helpers.

Each :class:`PendingSettle` is what a retry needs: the envelope, the access token, the amount and
the ``agentRequestId`` (settle is idempotent on it, so a retry never burns twice). The store on
disk is :class:`~.settle_journal.SettleJournal` (0600, in a 0700 directory, because it holds
access tokens); replicas share :class:`~.redis_store.RedisSettleStore`. The helpers here write a
file atomically and durably (a crash leaves the old or the new bytes, never half of them) and set
an unreadable one aside.

The synchronous whole-file ``SettleQueue`` that first lived here is gone; its file format (one
JSON array) is still read, once, by :class:`~.settle_journal.SettleJournal`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...redact import get_logger

log = get_logger("svc_gateway.paid")

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
