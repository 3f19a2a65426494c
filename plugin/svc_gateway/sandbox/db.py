"""The SQLite database behind the sandbox: schema, transactions, the signing secret.

All calls are synchronous on the event-loop thread. A check and the write that depends on
it run inside one :meth:`Store.tx` with no ``await`` between them, which is what makes
verify holds and settle burns atomic under concurrent requests.
"""

from __future__ import annotations

import secrets
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from .tokens import derive_key

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS accounts (
    address TEXT PRIMARY KEY, label TEXT NOT NULL, card_id TEXT NOT NULL UNIQUE,
    card_alias TEXT, wallet_alias TEXT, created_at REAL NOT NULL);
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
    amount TEXT NOT NULL, hold_id TEXT, tx TEXT NOT NULL, created_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS burns_holding ON burns(plan_id, holder);
CREATE TABLE IF NOT EXISTS checkouts (
    id TEXT PRIMARY KEY, plan_id TEXT NOT NULL, buyer TEXT NOT NULL, client_ref TEXT NOT NULL,
    created_at REAL NOT NULL, expires_at REAL NOT NULL, completed_at REAL, tx TEXT);
CREATE TABLE IF NOT EXISTS delegations (
    id TEXT PRIMARY KEY, owner TEXT NOT NULL, provider TEXT NOT NULL,
    payment_method_id TEXT NOT NULL, currency TEXT NOT NULL, spending_limit_cents TEXT NOT NULL,
    plan_id TEXT, max_transactions INTEGER, transaction_count INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL, expires_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS delegations_owner ON delegations(owner);
CREATE TABLE IF NOT EXISTS holds (
    id TEXT PRIMARY KEY, plan_id TEXT NOT NULL, payer TEXT NOT NULL, token_jti TEXT NOT NULL,
    delegation_id TEXT NOT NULL, amount TEXT NOT NULL, network TEXT NOT NULL,
    created_at REAL NOT NULL, expires_at REAL NOT NULL, answer TEXT);
CREATE INDEX IF NOT EXISTS holds_holding ON holds(plan_id, payer);
"""

Row = sqlite3.Row


class Store:
    """One SQLite connection plus the clock and limits every ledger rule reads."""

    def __init__(
        self, path: str, *, clock: Callable[[], float], hold_ttl_secs: float = 300.0
    ) -> None:
        self.path = path
        self.clock = clock
        self.hold_ttl_secs = hold_ttl_secs
        self.conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self.conn.row_factory = sqlite3.Row
        if path != ":memory:" and not path.startswith("file::memory:"):
            self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA foreign_keys=ON")
        self.conn.executescript(SCHEMA)
        self._depth = 0
        secret = self._secret()
        self.key_signing = derive_key(secret, "svc-sandbox/api-key")
        self.token_signing = derive_key(secret, "svc-sandbox/x402-token")

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
