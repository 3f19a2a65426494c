"""The database file, the clock seam, the seeding helper and the public contract info."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import httpx
import pytest

from svc_gateway.sandbox import ManualClock, start_sandbox
from svc_gateway.sandbox.db import Store, StoreError
from svc_gateway.sandbox.seed import seed_settles

from .support import Actor, Api, envelope


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


async def test_database_file_is_owner_only(tmp_path: Path) -> None:
    db = tmp_path / "sandbox.sqlite"
    server = await start_sandbox(db=str(db))
    try:
        await server.create_account("x")
        assert mode(db) == 0o600  # it holds the signing secret
        for sidecar in (Path(f"{db}-wal"), Path(f"{db}-shm")):
            if sidecar.exists():
                assert mode(sidecar) & 0o077 == 0, sidecar
    finally:
        await server.close()


async def test_existing_world_readable_database_is_tightened(tmp_path: Path) -> None:
    db = tmp_path / "old.sqlite"
    Store(str(db), clock=ManualClock(0)).close()
    os.chmod(db, 0o644)
    Store(str(db), clock=ManualClock(0)).close()
    assert mode(db) == 0o600


def test_world_writable_directory_is_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    Store(str(shared / "x.sqlite"), clock=ManualClock(0)).close()
    assert "world-writable" in caplog.text


def test_a_database_from_an_older_sandbox_is_refused_clearly(tmp_path: Path) -> None:
    db = tmp_path / "v1.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        conn.execute("INSERT INTO meta VALUES ('secret', 'aa')")
    conn.close()
    with pytest.raises(StoreError, match="older sandbox"):
        Store(str(db), clock=ManualClock(0))


def test_manual_clock_moves_only_forward() -> None:
    clock = ManualClock(100.0)
    assert clock() == 100.0 and clock.advance(5) == 105.0 and clock() == 105.0
    with pytest.raises(ValueError):
        clock.advance(-1)


async def test_contract_info_at_the_root(api: Api) -> None:
    origin = api.server.origin
    async with httpx.AsyncClient(base_url=origin) as http:
        answer = await http.get("/")
    assert answer.status_code == 200
    deployment = answer.json()["deployment"]
    contracts = deployment["contracts"]
    assert {"PayAsYouGoTemplate", "NFT1155Credits", "NFT1155ExpirableCreditsV2"} <= set(contracts)
    assert len(contracts) == 19
    assert all(v.startswith("0x") and len(v) == 42 for v in contracts.values())
    assert isinstance(deployment["version"], str)


async def test_add_plan_to_agent(api: Api, owner: Actor, buyer: Actor) -> None:
    first, second = await api.plan(owner), await api.plan(owner)
    agent_id = await api.agent(owner, [first])
    path = f"/protocol/agents/{agent_id}/plan/{second}"
    stranger = await api.http.post(path, headers=buyer.headers)
    assert stranger.status_code == 403
    foreign_plan = await api.plan(buyer)
    theirs = await api.http.post(
        f"/protocol/agents/{agent_id}/plan/{foreign_plan}", headers=owner.headers
    )
    assert theirs.status_code == 403
    for _ in range(2):  # adding twice is harmless
        added = await api.http.post(path, headers=owner.headers)
        assert added.status_code == 200 and added.json()["success"] is True
    agent = (await api.http.get(f"/protocol/agents/{agent_id}")).json()
    assert agent["registry"]["plans"] == [first, second]
    missing = await api.http.post(f"/protocol/agents/{agent_id}/plan/42", headers=owner.headers)
    assert missing.status_code == 404


async def test_seeded_history_is_served_and_conserved(tmp_path: Path) -> None:
    db = tmp_path / "seeded.sqlite"
    seeded = seed_settles(str(db), 300, spare_credits=5)
    assert mode(db) == 0o600
    server = await start_sandbox(db=str(db))
    try:
        async with httpx.AsyncClient(base_url=server.base_url) as http:
            plan_id, buyer = seeded["planId"], seeded["buyer"]
            ledger = (await http.get(f"/sandbox/ledger/{plan_id}/{buyer['address']}")).json()
            assert ledger["granted"] == ledger["auditGranted"] == "305"
            assert ledger["burned"] == ledger["auditBurned"] == "300"
            assert ledger["balance"] == "5"
            body = {
                "accepted": {"scheme": "svc:erc4337", "planId": plan_id},
                "delegationConfig": {"delegationId": seeded["delegationId"]},
            }
            token = (
                await http.post(
                    "/x402/permissions",
                    json=body,
                    headers={"Authorization": f"Bearer {buyer['apiKey']}"},
                )
            ).json()["accessToken"]
            settled = await http.post(
                "/x402/settle",
                json={"paymentRequired": envelope(plan_id), "x402AccessToken": token},
                headers={"Authorization": f"Bearer {seeded['owner']['apiKey']}"},
            )
            assert settled.json()["remainingBalance"] == "4"
    finally:
        await server.close()
