"""Organizations: workspaces, their members and white-label customers, and an activity feed.

The shapes are what payments_py ``api/organizations_api.py`` sends and reads. Every account a
person opens (``POST /sandbox/accounts``, the key page, the browser login) is the Admin of
its own Enterprise organization, created on first use. Its admins enrol members
(``POST /organizations/account`` with ``uniqueExternalId``) and onboard white-label customers
(``{"email", "as": "customer"}``): each gets a sandbox account of its own and a ``local:`` API
key that works with every other route. Customers take no member seat and belong to no
organization. The active workspace is the ``X-Current-Org-Id`` header when the caller is a
member of it (403 ``BCK.AUTH.0004`` otherwise), else the caller's own organization.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any

from . import validation as v
from .accounts import create_account, issue_key
from .db import Row, Store
from .errors import ApiError, bad_request
from .plans import iso

ORG_HEADER = "X-Current-Org-Id"
ROLES = ("Admin", "Member", "Client")
NOT_MEMBER = "BCK.AUTH.0004"
#: what a page of the activity feed may hold (the backend caps ``limit`` at 200)
MAX_ACTIVITY_LIMIT = 200


def user_id_of(address: str) -> str:
    """The service-side user id of an account (stable, derived from its address)."""
    return "us-" + hashlib.sha256(address.encode()).hexdigest()[:24]


def _forbidden(message: str) -> ApiError:
    return ApiError(
        403,
        NOT_MEMBER,
        message,
        "Send X-Current-Org-Id with an organization you belong to "
        "(GET /organizations/my-memberships lists them)",
    )


def own_org(store: Store, address: str) -> str | None:
    """The organization ``address`` administers, created on first use for a person's own
    account; ``None`` for onboarded customers and enrolled members."""
    row = store.one(
        "SELECT org_id FROM memberships WHERE address = ? AND role = 'Admin' AND is_active = 1 "
        "ORDER BY created_at, rowid LIMIT 1",
        (address,),
    )
    if row is not None:
        return str(row["org_id"])
    account = store.one("SELECT label, kind FROM accounts WHERE address = ?", (address,))
    if account is None or account["kind"] != "owner":
        return None
    org_id = "org-" + uuid.uuid4().hex
    name = f"{account['label'] or address} organization"
    now = store.now()
    with store.tx():
        store.run(
            "INSERT INTO organizations (id, name, org_type, created_at) VALUES (?, ?, ?, ?)",
            (org_id, name, "Enterprise", now),
        )
        _join(store, org_id, address, "Admin", None)
    return org_id


def _join(store: Store, org_id: str, address: str, role: str, external_id: str | None) -> None:
    store.run(
        "INSERT INTO memberships (org_id, address, role, is_active, external_id, created_at) "
        "VALUES (?, ?, ?, 1, ?, ?)",
        (org_id, address, role, external_id, store.now()),
    )


def _membership(store: Store, org_id: str, address: str) -> Row | None:
    return store.one(
        "SELECT * FROM memberships WHERE org_id = ? AND address = ? AND is_active = 1",
        (org_id, address),
    )


def active_org(store: Store, address: str, header: str | None) -> str | None:
    """The workspace a call acts in: the header's organization (the caller must belong to
    it), else the caller's own."""
    if header:
        if _membership(store, header.strip(), address) is None:
            raise _forbidden("You are not a member of the organization in X-Current-Org-Id")
        return header.strip()
    return own_org(store, address)


def _admin_org(store: Store, address: str, header: str | None) -> str:
    org_id = active_org(store, address, header)
    row = _membership(store, org_id, address) if org_id else None
    if org_id is None or row is None or row["role"] != "Admin":
        raise _forbidden("Only an Admin of the organization may do that")
    return org_id


def record(
    store: Store,
    org_id: str | None,
    event_type: str,
    actor: str | None,
    subject: dict[str, Any],
    metadata: dict[str, Any] | None = None,
) -> None:
    """Append one event to an organization's activity feed (nothing without an org)."""
    if org_id is None:
        return
    store.run(
        "INSERT INTO org_events (id, org_id, event_type, actor_user_id, subject, metadata, "
        "occurred_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            str(uuid.uuid4()),
            org_id,
            event_type,
            user_id_of(actor) if actor else None,
            json.dumps(subject),
            json.dumps(metadata) if metadata is not None else None,
            store.now(),
        ),
    )


def my_memberships(store: Store, address: str) -> list[dict[str, Any]]:
    """``GET /organizations/my-memberships``: ``MyMembership`` items."""
    own_org(store, address)
    rows = store.all(
        "SELECT m.org_id, m.role, o.name, o.org_type FROM memberships m "
        "JOIN organizations o ON o.id = m.org_id WHERE m.address = ? AND m.is_active = 1 "
        "ORDER BY m.created_at, m.rowid",
        (address,),
    )
    return [
        {
            "orgId": r["org_id"],
            "orgName": r["name"],
            "role": r["role"],
            "orgType": r["org_type"],
            "isAdmin": r["role"] == "Admin",
            "hasSubscriptionHistory": False,
        }
        for r in rows
    ]


def _member_item(row: Row) -> dict[str, Any]:
    return {
        "id": f"mb-{row['rowid']}",
        "userId": user_id_of(row["address"]),
        "orgId": row["org_id"],
        "userAddress": row["address"],
        "role": row["role"],
        "isActive": bool(row["is_active"]),
        "createdAt": iso(row["created_at"]),
        "updatedAt": iso(row["created_at"]),
        "externalId": row["external_id"],
    }


def members(store: Store, address: str, header: str | None, body: dict[str, Any]) -> dict[str, Any]:
    """``POST /organizations/members`` (Admin only): ``{members, totalResults, page, offset}``."""
    org_id = _admin_org(store, address, header)
    page = v.bigint(body, "page", default=1, low=1, high=1_000_000)
    size = v.bigint(body, "offset", default=100, low=1, high=100)
    role = body.get("role")
    if role is not None and role not in ROLES:
        raise bad_request(f"role must be one of {', '.join(ROLES)}")
    active = body.get("isActive")
    if active is not None and not isinstance(active, bool):
        raise bad_request("isActive must be true or false")
    where = "org_id = ?"
    params: list[Any] = [org_id]
    if role is not None:
        where += " AND role = ?"
        params.append(role)
    if active is not None:
        where += " AND is_active = ?"
        params.append(int(active))
    total = store.one(f"SELECT COUNT(*) AS n FROM memberships WHERE {where}", params)
    rows = store.all(
        f"SELECT rowid, * FROM memberships WHERE {where} ORDER BY created_at, rowid "
        "LIMIT ? OFFSET ?",
        [*params, size, (page - 1) * size],
    )
    return {
        "members": [_member_item(r) for r in rows],
        "totalResults": int(total["n"]) if total else 0,
        "page": page,
        "offset": size,
    }


def enrol(
    store: Store, address: str, header: str | None, body: dict[str, Any]
) -> tuple[int, dict[str, Any]]:
    """``POST /organizations/account`` (Admin only): a white-label customer (``as:
    customer``, by email) or a member (``uniqueExternalId``); ``(status, answer)``."""
    org_id = _admin_org(store, address, header)
    if body.get("as") is not None and body.get("as") != "customer":
        raise bad_request('as must be "customer" (or left out to enrol a member)')
    if body.get("as") == "customer":
        return _onboard_customer(store, org_id, address, body)
    external = v.req_text(body, "uniqueExternalId", max_len=200)
    email = v.text(body, "email", required=False, max_len=320)
    role = body.get("role") or "Member"
    if role not in ("Admin", "Member"):
        raise bad_request("role must be Admin or Member")
    with store.tx():
        row = store.one(
            "SELECT address FROM memberships WHERE org_id = ? AND external_id = ?",
            (org_id, external),
        )
        already = row is not None
        if row is not None:
            user = str(row["address"])
            key = issue_key(store, user)
        else:
            created = create_account(store, email or external, kind="member")
            user, key = created["address"], created["apiKey"]
            _join(store, org_id, user, role, external)
            record(store, org_id, "member.joined", address, _subject("member", user, role))
    return (200 if already else 201), {"walletResult": _wallet(key, user, alreadyMember=already)}


def _subject(kind: str, address: str, role: str | None = None) -> dict[str, Any]:
    user = user_id_of(address)
    subject: dict[str, Any] = {"kind": kind, "id": user, "userId": user}
    if role is not None:
        subject["role"] = role
    return subject


def _wallet(key: str, address: str, **extra: Any) -> dict[str, Any]:
    return {
        "hash": key,
        "userId": user_id_of(address),
        "userWallet": address,
        # the service's encrypted server-side copy; never a usable Bearer (payments_py docs)
        "nvmApiKey": "enc:" + hashlib.sha256(key.encode()).hexdigest(),
        **extra,
    }


def _onboard_customer(
    store: Store, org_id: str, admin: str, body: dict[str, Any]
) -> tuple[int, dict[str, Any]]:
    email = v.req_text(body, "email", max_len=320).strip().lower()
    if "@" not in email:
        raise bad_request("email must be an email address")
    with store.tx():
        row = store.one("SELECT org_id, address FROM org_customers WHERE email = ?", (email,))
        if row is not None and row["org_id"] != org_id:
            # another organization's customer: no key, no identity (consent pending)
            return 202, {"walletResult": {"consentRequired": True}}
        if row is not None:
            user = str(row["address"])
            key = issue_key(store, user)
        else:
            created = create_account(store, email, kind="customer")
            user, key = created["address"], created["apiKey"]
            store.run(
                "INSERT INTO org_customers (email, org_id, address, created_at) "
                "VALUES (?, ?, ?, ?)",
                (email, org_id, user, store.now()),
            )
            record(store, org_id, "customer.added", admin, _subject("customer", user))
    status = 200 if row is not None else 201
    return status, {
        "walletResult": _wallet(key, user, isCustomer=True, customerRecorded=row is None)
    }


def activity(store: Store, address: str, org_id: str, query: dict[str, str]) -> dict[str, Any]:
    """``GET /organizations/{orgId}/activity``: ``{items, total}``, newest first."""
    own_org(store, address)
    if _membership(store, org_id, address) is None:
        raise _forbidden("You are not a member of this organization")
    where = "org_id = ?"
    params: list[Any] = [org_id]
    types = [t for t in (query.get("eventType") or "").split(",") if t.strip()]
    if types:
        where += f" AND event_type IN ({', '.join('?' for _ in types)})"
        params.extend(t.strip() for t in types)
    if query.get("actorUserId"):
        where += " AND actor_user_id = ?"
        params.append(query["actorUserId"])
    page = _query_number(query, "page", 1, 1_000_000)
    limit = _query_number(query, "limit", 20, MAX_ACTIVITY_LIMIT)
    total = store.one(f"SELECT COUNT(*) AS n FROM org_events WHERE {where}", params)
    rows = store.all(
        f"SELECT * FROM org_events WHERE {where} ORDER BY occurred_at DESC, rowid DESC "
        "LIMIT ? OFFSET ?",
        [*params, limit, (page - 1) * limit],
    )
    items = [
        {
            "id": r["id"],
            "eventType": r["event_type"],
            "actorUserId": r["actor_user_id"],
            "subject": json.loads(r["subject"]),
            "metadata": json.loads(r["metadata"]) if r["metadata"] else None,
            "occurredAt": iso(r["occurred_at"]),
        }
        for r in rows
    ]
    return {"items": items, "total": int(total["n"]) if total else 0}


def _query_number(query: dict[str, str], key: str, default: int, high: int) -> int:
    raw = query.get(key)
    if raw is None or raw == "":
        return default
    return v.parse_bigint(raw, f"query parameter {key}", low=1, high=high)
