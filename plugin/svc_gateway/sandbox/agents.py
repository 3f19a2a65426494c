"""Agents, their API description and their plan associations (WIRE.md §2, §2.5, §2.6).

Endpoint items are stored as registered. Only ``{"<VERB>": url}`` items take part in the
allow-list, as on the service: it reads each item as ``Object.entries(ep)[0]``, so a
``{"verb": "POST", "url": ...}`` item (the Python SDK's ``Endpoint`` model) is accepted at
registration but never matches, and an agent whose endpoints all look like that refuses
every ``resource.url`` with ``BCK.PROTOCOL.0031`` (payments_py ``common/types.py``
``Endpoint``). Credentials given for calling the agent are checked, never stored.

An endpoint may be an MCP logical URI, ``mcp://<serverName>/tools/<name>`` (or
``resources``/``prompts``, or a final ``*``): the SDKs' MCP paywall verifies a tool call
with that URI plus the call's arguments as a query (``payments_py/mcp/utils/logical_url.py``),
which matches on scheme, server and path, the query ignored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from . import validation as v
from .db import Row, Store
from .errors import (
    ENDPOINT_NOT_ALLOWED,
    PLAN_NOT_ASSOCIATED,
    ApiError,
    agent_not_found,
    bad_request,
    not_owner,
)
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
        """The endpoint items as registered."""
        return list(self.doc["api"]["endpoints"])

    @property
    def allow_list(self) -> list[tuple[str, str]]:
        """``(VERB, url pattern)`` of the items the service can match (``{"POST": url}``)."""
        out: list[tuple[str, str]] = []
        for item in self.endpoints:
            if len(item) == 1:
                ((verb, url),) = item.items()
                if verb.upper() in VERBS:
                    out.append((verb.upper(), url))
        return out

    def match(self, url: str, verb: str | None) -> tuple[str, str] | None:
        """The allow-list entry ``url`` (and ``verb`` when given) falls under."""
        for item_verb, pattern in self.allow_list:
            if verb and verb.upper() != item_verb:
                continue
            if url_matches(pattern, url):
                return pattern, item_verb
        return None


def _path_matches(pattern: str, path: str) -> bool:
    """``:name`` matches one segment; a final ``*`` matches the rest."""
    want = pattern.rstrip("/").split("/")
    got = path.rstrip("/").split("/")
    for i, segment in enumerate(want):
        if segment == "*" and i == len(want) - 1:
            return len(got) >= i
        if i >= len(got) or not (segment.startswith(":") or segment == got[i]):
            return False
    return len(got) == len(want)


def url_matches(pattern: str, url: str) -> bool:
    """An absolute URL must match scheme, host and path; a relative one the path only."""
    want, got = urlsplit(pattern), urlsplit(url)
    if got.scheme or got.netloc:
        if (want.scheme, want.netloc.lower()) != (got.scheme, got.netloc.lower()):
            return False
    elif not url.startswith("/"):
        return False
    return _path_matches(want.path or "/", got.path or "/")


def _url(value: object, name: str) -> str:
    if not isinstance(value, str) or not value.startswith(_URL_SCHEMES) or len(value) > 2048:
        raise bad_request(f"{name} must be an http(s) URL or an mcp:// URI")
    return value


def _endpoint(item: object, name: str) -> dict[str, str]:
    """``{"POST": url}`` (matched) or ``{"verb", "url"}`` (stored, never matched)."""
    if isinstance(item, dict) and len(item) == 1:
        ((verb, url),) = item.items()
        if verb.upper() in VERBS:
            return {verb.upper(): _url(url, f"{name}.{verb}")}
    if (
        isinstance(item, dict)
        and set(item) == {"verb", "url"}
        and all(isinstance(value, str) and len(value) <= 2048 for value in item.values())
    ):
        return {"verb": item["verb"], "url": item["url"]}
    raise bad_request(
        f'{name} must look like {{"POST": "https://..."}} (the verb as the key)',
        code=ENDPOINT_NOT_ALLOWED,
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
    store: Store,
    owner: str,
    meta: dict[str, Any],
    api: dict[str, Any],
    plan_ids: list[str],
    org_id: str | None = None,
) -> str:
    agent_id = "did:svc:" + random_hex(16)
    now = store.now()
    doc = {"metadata": meta, "api": api, "orgId": org_id}
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
        "orgId": agent.doc.get("orgId"),
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


def update_agent(
    store: Store, caller: str, agent_id: str, meta: dict[str, Any], api: dict[str, Any]
) -> None:
    """``PUT /protocol/agents/{agentId}``: replace the metadata and API attributes (owner only;
    404 unknown, 403 not yours). Plan associations are kept."""
    agent = require_agent(store, agent_id)
    if agent.owner != caller:
        raise not_owner("agent")
    with store.tx():
        store.run(
            "UPDATE agents SET name = ?, doc = ? WHERE id = ?",
            (meta["name"], json.dumps({**agent.doc, "metadata": meta, "api": api}), agent.id),
        )


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


def add_plan(store: Store, caller: str, agent_id: str, plan_id: str) -> bool:
    """``POST /protocol/agents/{agentId}/plan/{planId}``: both must be the caller's.

    Returns ``False`` when the plan was already associated (nothing changes).
    """
    agent = require_agent(store, agent_id)
    if agent.owner != caller:
        raise not_owner("agent")
    plan = require_plan(store, plan_id)
    if plan.owner != caller:
        raise not_owner(f"plan ({plan.id})")
    with store.tx():
        if is_associated(store, agent.id, plan.id):
            return False
        store.run(
            "INSERT INTO agent_plans (agent_id, plan_id, added_at) VALUES (?, ?, ?)",
            (agent.id, plan.id, store.now()),
        )
    return True
