"""Agents, their API description and their plan associations (WIRE.md §2, §2.5, §2.6).

Endpoint items arrive in two shapes (``{"POST": url}`` and ``{"verb", "url"}``) and are
stored in the second; credentials given for calling the agent are checked, never stored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from . import validation as v
from .db import Row, Store
from .errors import PLAN_NOT_ASSOCIATED, ApiError, agent_not_found, bad_request, not_owner
from .plan_input import metadata
from .plans import Plan, iso, order_clause, require_plan
from .tokens import random_hex
from .validation import Paging

VERBS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
AUTH_TYPES = ("none", "basic", "oauth", "bearer")
_URL_SCHEMES = ("http://", "https://", "mcp://")
_CREDENTIAL_FIELDS = ("username", "password", "token", "apiKey")


@dataclass(frozen=True)
class Agent:
    id: str
    owner: str
    doc: dict[str, Any]
    created_at: float

    @classmethod
    def from_row(cls, row: Row) -> Agent:
        return cls(row["id"], row["owner"], json.loads(row["doc"]), row["created_at"])

    @property
    def name(self) -> str:
        return str(self.doc["metadata"]["name"])

    @property
    def endpoints(self) -> list[dict[str, str]]:
        return list(self.doc["api"]["endpoints"])


def _url(value: object, name: str) -> str:
    if not isinstance(value, str) or not value.startswith(_URL_SCHEMES) or len(value) > 2048:
        raise bad_request(f"{name} must be an http(s) URL or an mcp:// URI")
    return value


def _endpoint(item: object, name: str) -> dict[str, str]:
    if isinstance(item, dict) and "url" in item:
        verb = item.get("verb")
        if not isinstance(verb, str) or verb.upper() not in VERBS:
            raise bad_request(f"{name}.verb must be one of {', '.join(VERBS)}")
        return {"verb": verb.upper(), "url": _url(item["url"], f"{name}.url")}
    if isinstance(item, dict) and len(item) == 1:
        ((verb, url),) = item.items()
        if verb.upper() in VERBS:
            return {"verb": verb.upper(), "url": _url(url, f"{name}.{verb}")}
    raise bad_request(
        f'{name} must look like {{"POST": "https://..."}} or '
        '{"verb": "POST", "url": "https://..."}'
    )


def api_attributes(body: dict[str, Any], where: str) -> dict[str, Any]:
    """``agentApiAttributes`` (may be empty for a minimal agent)."""
    api = v.obj(body, "agentApiAttributes", where, required=False)
    at = f"{where}agentApiAttributes."
    raw = api.get("endpoints", [])
    if not isinstance(raw, list) or len(raw) > 100:
        raise bad_request(f"{at}endpoints must be a list of at most 100 items")
    auth_type = v.text(api, "authType", at, required=False) or "none"
    if auth_type not in AUTH_TYPES:
        raise bad_request(f"{at}authType must be one of {', '.join(AUTH_TYPES)}")
    for key in _CREDENTIAL_FIELDS:
        v.text(api, key, at, required=False)
    if api.get("headers") is not None and not isinstance(api.get("headers"), dict | list):
        raise bad_request(f"{at}headers must be an object")
    definition = api.get("agentDefinitionUrl")
    return {
        "endpoints": [_endpoint(e, f"{at}endpoints[{i}]") for i, e in enumerate(raw)],
        "openEndpoints": v.str_list(api, "openEndpoints", at),
        "agentDefinitionUrl": None
        if definition in (None, "")
        else _url(definition, f"{at}agentDefinitionUrl"),
        "authType": auth_type,
    }


def owned_plans(store: Store, owner: str, raw: object, name: str) -> list[str]:
    """Plan ids the caller may attach: they must exist (404) and be the caller's (403)."""
    if not isinstance(raw, list) or len(raw) > 100:
        raise bad_request(f"{name} must be a list of plan ids")
    ids: list[str] = []
    for i, item in enumerate(raw):
        plan = require_plan(store, v.identifier(item, f"{name}[{i}]"))
        if plan.owner != owner:
            raise not_owner(f"plan ({plan.id})")
        if plan.id not in ids:
            ids.append(plan.id)
    return ids


def insert_agent(
    store: Store, owner: str, meta: dict[str, Any], api: dict[str, Any], plan_ids: list[str]
) -> str:
    agent_id = "did:svc:" + random_hex(16)
    now = store.now()
    doc = {"metadata": meta, "api": api}
    with store.tx():
        store.run(
            "INSERT INTO agents (id, owner, name, doc, created_at) VALUES (?, ?, ?, ?, ?)",
            (agent_id, owner, meta["name"], json.dumps(doc), now),
        )
        for plan_id in plan_ids:
            store.run(
                "INSERT INTO agent_plans (agent_id, plan_id, added_at) VALUES (?, ?, ?)",
                (agent_id, plan_id, now),
            )
    return agent_id


def agent_document(body: dict[str, Any], where: str = "") -> tuple[dict[str, Any], dict[str, Any]]:
    return metadata(body, where), api_attributes(body, where)


def get_agent(store: Store, agent_id: str) -> Agent | None:
    row = store.one("SELECT * FROM agents WHERE id = ?", (agent_id,))
    return None if row is None else Agent.from_row(row)


def require_agent(store: Store, agent_id: str) -> Agent:
    agent = get_agent(store, agent_id)
    if agent is None:
        raise agent_not_found(agent_id)
    return agent


def plan_ids_of(store: Store, agent_id: str) -> list[str]:
    rows = store.all(
        "SELECT plan_id FROM agent_plans WHERE agent_id = ? ORDER BY added_at, rowid", (agent_id,)
    )
    return [str(r["plan_id"]) for r in rows]


def is_associated(store: Store, agent_id: str, plan_id: str) -> bool:
    row = store.one(
        "SELECT 1 FROM agent_plans WHERE agent_id = ? AND plan_id = ?", (agent_id, plan_id)
    )
    return row is not None


def agent_view(store: Store, agent: Agent) -> dict[str, Any]:
    """The agent object of ``GET /protocol/agents/{agentId}``."""
    api = agent.doc["api"]
    return {
        "id": agent.id,
        "agentId": agent.id,
        "owner": agent.owner,
        "metadata": {"main": dict(agent.doc["metadata"])},
        "registry": {"owner": agent.owner, "plans": plan_ids_of(store, agent.id)},
        "endpoints": list(api["endpoints"]),
        "openEndpoints": list(api["openEndpoints"]),
        "agentDefinitionUrl": api["agentDefinitionUrl"],
        "authType": api["authType"],
        "createdAt": iso(agent.created_at),
    }


def list_agents(store: Store, owner: str, paging: Paging) -> tuple[int, list[Agent]]:
    total = store.one("SELECT COUNT(*) AS n FROM agents WHERE owner = ?", (owner,))
    rows = store.all(
        f"SELECT * FROM agents WHERE owner = ? ORDER BY {order_clause(paging, 'agents')} "
        "LIMIT ? OFFSET ?",
        (owner, paging.size, paging.skip),
    )
    return (int(total["n"]) if total else 0), [Agent.from_row(r) for r in rows]


def agents_of_plan(store: Store, plan_id: str, paging: Paging) -> tuple[int, list[Agent]]:
    total = store.one("SELECT COUNT(*) AS n FROM agent_plans WHERE plan_id = ?", (plan_id,))
    rows = store.all(
        "SELECT agents.* FROM agents JOIN agent_plans ON agent_plans.agent_id = agents.id "
        f"WHERE agent_plans.plan_id = ? ORDER BY {order_clause(paging, 'agents')} "
        "LIMIT ? OFFSET ?",
        (plan_id, paging.size, paging.skip),
    )
    return (int(total["n"]) if total else 0), [Agent.from_row(r) for r in rows]


def plans_of_agent(store: Store, agent_id: str, paging: Paging) -> tuple[int, list[Plan]]:
    total = store.one("SELECT COUNT(*) AS n FROM agent_plans WHERE agent_id = ?", (agent_id,))
    rows = store.all(
        "SELECT plans.* FROM plans JOIN agent_plans ON agent_plans.plan_id = plans.id "
        f"WHERE agent_plans.agent_id = ? ORDER BY {order_clause(paging, 'plans')} "
        "LIMIT ? OFFSET ?",
        (agent_id, paging.size, paging.skip),
    )
    return (int(total["n"]) if total else 0), [Plan.from_row(r) for r in rows]


def remove_plan(store: Store, caller: str, agent_id: str, plan_id: str) -> None:
    """``DELETE /protocol/agents/{agentId}/plan/{planId}``: 404 unknown, 403 not yours."""
    agent = require_agent(store, agent_id)
    if agent.owner != caller:
        raise not_owner("agent")
    require_plan(store, plan_id)
    with store.tx():
        deleted = store.run(
            "DELETE FROM agent_plans WHERE agent_id = ? AND plan_id = ?", (agent_id, plan_id)
        ).rowcount
    if not deleted:
        raise ApiError(
            404, PLAN_NOT_ASSOCIATED, f"Plan {plan_id!r} is not associated with this agent"
        )
