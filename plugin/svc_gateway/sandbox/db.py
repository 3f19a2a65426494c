"""The SQLite database behind the sandbox: schema, transactions, the signing secret.

All calls are synchronous on the event-loop thread. A check and the write that depends on
it run inside one :meth:`Store.tx` with no ``await`` between them, which is what makes a
settle's balance check and its burn atomic under concurrent requests.

The file holds the signing secret, so it is created owner-only (0600) and tightened to
0600 when an existing file is opened; a world-writable directory is logged as a warning.
"""

from __future__ import annotations

import logging
import os
import secrets
import sqlite3
import stat
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from .tokens import derive_key

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS accounts (
    address TEXT PRIMARY KEY, label TEXT NOT NULL, card_id TEXT NOT NULL UNIQUE,
    card_alias TEXT, wallet_alias TEXT, bt_card_id TEXT, bt_alias TEXT,
    kind TEXT NOT NULL DEFAULT 'owner',
    created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS api_keys (
    jti TEXT PRIMARY KEY, address TEXT NOT NULL REFERENCES accounts(address),
    pinned_version TEXT NOT NULL, created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS plans (
    id TEXT PRIMARY KEY, owner TEXT NOT NULL, name TEXT NOT NULL, doc TEXT NOT NULL,
    orders_count INTEGER NOT NULL DEFAULT 0, created_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS plans_owner ON plans(owner);
CREATE TABLE IF NOT EXISTS agents (
    id TEXT PRIMARY KEY, owner TEXT NOT NULL, name TEXT NOT NULL, doc TEXT NOT NULL,
    created_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS agents_owner ON agents(owner);
CREATE TABLE IF NOT EXISTS agent_plans (
    agent_id TEXT NOT NULL REFERENCES agents(id), plan_id TEXT NOT NULL REFERENCES plans(id),
    added_at REAL NOT NULL, PRIMARY KEY (agent_id, plan_id));
CREATE INDEX IF NOT EXISTS agent_plans_plan ON agent_plans(plan_id);
CREATE TABLE IF NOT EXISTS orders (
    id INTEGER PRIMARY KEY AUTOINCREMENT, plan_id TEXT NOT NULL, buyer TEXT NOT NULL,
    kind TEXT NOT NULL, tx TEXT NOT NULL, created_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS orders_plan_buyer ON orders(plan_id, buyer);
CREATE TABLE IF NOT EXISTS grants (
    id INTEGER PRIMARY KEY AUTOINCREMENT, plan_id TEXT NOT NULL, holder TEXT NOT NULL,
    amount TEXT NOT NULL, expires_at REAL, source TEXT NOT NULL, tx TEXT NOT NULL,
    created_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS grants_holding ON grants(plan_id, holder);
CREATE TABLE IF NOT EXISTS burns (
    id INTEGER PRIMARY KEY AUTOINCREMENT, plan_id TEXT NOT NULL, holder TEXT NOT NULL,
    amount TEXT NOT NULL, request_id TEXT, tx TEXT NOT NULL, created_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS burns_holding ON burns(plan_id, holder);
CREATE TABLE IF NOT EXISTS checkouts (
    id TEXT PRIMARY KEY, plan_id TEXT NOT NULL, buyer TEXT NOT NULL, client_ref TEXT NOT NULL,
    created_at REAL NOT NULL, expires_at REAL NOT NULL, completed_at REAL, tx TEXT);
CREATE TABLE IF NOT EXISTS delegations (
    id TEXT PRIMARY KEY, owner TEXT NOT NULL, provider TEXT NOT NULL,
    payment_method_id TEXT NOT NULL, currency TEXT NOT NULL, spending_limit_cents TEXT NOT NULL,
    plan_id TEXT, max_transactions INTEGER, transaction_count INTEGER NOT NULL DEFAULT 0,
    spent_cents TEXT NOT NULL DEFAULT '0',
    created_at REAL NOT NULL, expires_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS delegations_owner ON delegations(owner);
CREATE TABLE IF NOT EXISTS balances (
    plan_id TEXT NOT NULL, holder TEXT NOT NULL, plain TEXT NOT NULL, granted TEXT NOT NULL,
    burned TEXT NOT NULL, access_until REAL, PRIMARY KEY (plan_id, holder));
CREATE TABLE IF NOT EXISTS buckets (
    id INTEGER PRIMARY KEY AUTOINCREMENT, plan_id TEXT NOT NULL, holder TEXT NOT NULL,
    expires_at REAL NOT NULL, remaining TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS buckets_live ON buckets(plan_id, holder, expires_at);
CREATE TABLE IF NOT EXISTS agent_requests (
    id TEXT PRIMARY KEY, token_id TEXT NOT NULL, plan_id TEXT NOT NULL, payer TEXT NOT NULL,
    created_at REAL NOT NULL, expires_at REAL NOT NULL, answer TEXT);
CREATE TABLE IF NOT EXISTS spent_nonces (
    nonce TEXT PRIMARY KEY, agent_request_id TEXT, spent_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS organizations (
    id TEXT PRIMARY KEY, name TEXT NOT NULL, org_type TEXT NOT NULL, created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS memberships (
    org_id TEXT NOT NULL REFERENCES organizations(id), address TEXT NOT NULL,
    role TEXT NOT NULL, is_active INTEGER NOT NULL, external_id TEXT, created_at REAL NOT NULL,
    PRIMARY KEY (org_id, address));
CREATE INDEX IF NOT EXISTS memberships_address ON memberships(address);
CREATE TABLE IF NOT EXISTS org_customers (
    email TEXT PRIMARY KEY, org_id TEXT NOT NULL, address TEXT NOT NULL,
    created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS org_events (
    id TEXT PRIMARY KEY, org_id TEXT NOT NULL, event_type TEXT NOT NULL, actor_user_id TEXT,
    subject TEXT NOT NULL, metadata TEXT, occurred_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS org_events_org ON org_events(org_id, occurred_at);
CREATE TABLE IF NOT EXISTS oauth_clients (
    client_id TEXT PRIMARY KEY, doc TEXT NOT NULL, secret_hash TEXT, created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS redemptions (
    agent_request_id TEXT PRIMARY KEY, plan_id TEXT NOT NULL, holder TEXT NOT NULL,
    answer TEXT NOT NULL);
"""

Row = sqlite3.Row
#: How long a verified agentRequestId stays settleable. Verify reserves nothing, so this only
#: bounds how late a seller may settle (for instance retrying after an outage).
REQUEST_TTL_SECS = 86400.0
#: Bumped when the schema changes in a way an old file cannot follow.
SCHEMA_VERSION = "3"
log = logging.getLogger("svc_gateway.sandbox")


class StoreError(sqlite3.DatabaseError):
    """The database file cannot be used (wrong schema generation)."""


def is_memory(path: str) -> bool:
    return path == ":memory:" or path.startswith("file::memory:") or path == ""


def prepare_file(path: str) -> None:
    """Create the database file 0600 (or tighten an existing one) before SQLite opens it."""
    if is_memory(path) or path.startswith("file:"):
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) & 0o077:
            os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    directory = os.path.dirname(os.path.abspath(path))
    mode = os.stat(directory).st_mode
    if mode & stat.S_IWOTH and not mode & stat.S_ISVTX:
        log.warning(
            "sandbox database directory %s is world-writable: anyone on this machine could "
            "replace the database; keep it in a private directory",
            directory,
        )


class Store:
    """One SQLite connection plus the clock and limits every ledger rule reads."""

    def __init__(
        self, path: str, *, clock: Callable[[], float], request_ttl_secs: float = REQUEST_TTL_SECS
    ) -> None:
        self.path = path
        self.clock = clock
        #: How long a verified agent request may still be settled by its ``agentRequestId``.
        self.request_ttl_secs = request_ttl_secs
        try:
            prepare_file(path)
        except OSError as error:
            raise StoreError(f"{error.strerror or error}") from error
        self.conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self.conn.row_factory = sqlite3.Row
        if not is_memory(path):
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=NORMAL")
            self.conn.execute("PRAGMA cache_size=-16384")  # 16 MiB: hot B-tree pages stay
        self.conn.execute("PRAGMA foreign_keys=ON")
        self._depth = 0
        try:
            self._check_generation()
            self.conn.executescript(SCHEMA)
        except BaseException:
            self.conn.close()
            raise
        secret = self._secret()
        self.key_signing = derive_key(secret, "svc-sandbox/api-key")
        self.token_signing = derive_key(secret, "svc-sandbox/x402-token")

    def _check_generation(self) -> None:
        """Refuse a file written by an older sandbox (its balances would read as zero)."""
        has_meta = self.one("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'")
        if has_meta is None:
            self.conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            self.conn.execute(
                "INSERT INTO meta (key, value) VALUES ('schema', ?)", (SCHEMA_VERSION,)
            )
            return
        row = self.one("SELECT value FROM meta WHERE key = 'schema'")
        if row is None or row["value"] != SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} was written by an older sandbox (schema "
                f"{row['value'] if row else '1'}, this one needs {SCHEMA_VERSION}); "
                "start with a new --db file"
            )

    def _secret(self) -> bytes:
        """The signing secret, created on first open so a file DB keeps keys valid."""
        with self.tx():
            row = self.one("SELECT value FROM meta WHERE key = 'secret'")
            if row is None:
                value = secrets.token_hex(32)
                self.run("INSERT INTO meta (key, value) VALUES ('secret', ?)", (value,))
            else:
                value = str(row["value"])
        return bytes.fromhex(value)

    def now(self) -> float:
        return float(self.clock())

    @contextmanager
    def tx(self) -> Iterator[None]:
        """A write transaction; nested uses join the outer one."""
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        self.conn.execute("BEGIN IMMEDIATE")
        self._depth = 1
        try:
            yield
        except BaseException:
            self._depth = 0
            self.conn.execute("ROLLBACK")
            raise
        self._depth = 0
        self.conn.execute("COMMIT")

    def run(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        return self.conn.execute(sql, params)

    def one(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        row: Row | None = self.conn.execute(sql, params).fetchone()
        return row

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return list(self.conn.execute(sql, params).fetchall())

    def close(self) -> None:
        self.conn.close()
