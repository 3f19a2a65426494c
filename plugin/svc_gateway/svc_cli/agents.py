"""``svc agents``: register agents and read them (SPEC.md's register-agent row, plus the reads
the service offers)."""

from __future__ import annotations

import json
from typing import Any

import click

from ..service.models import AgentApi, AgentMetadata
from .inputs import bad, json_input, load_model
from .options import global_options, listing_options
from .plans import AGENT_COLUMNS, PLAN_COLUMNS, read_plan_inputs
from .session import Session, pass_session

VERBS = ("GET", "POST", "PUT", "PATCH", "DELETE")


@click.group()
@global_options
def agents() -> None:
    """Agents: register one with its plans, read one, list yours."""


def read_agent_api(data: dict[str, Any]) -> AgentApi:
    """``--agent-api`` as a model; endpoints must be ``{"POST": "<url>"}`` (WIRE.md §2.5)."""
    api = load_model(AgentApi, data, "--agent-api")
    for index, endpoint in enumerate(api.endpoints or []):
        verbs = list(endpoint)
        if len(verbs) != 1 or verbs[0].upper() not in VERBS:
            raise bad(
                "--agent-api",
                f'endpoints[{index}] must be one verb and its URL, e.g. {{"POST": '
                '"https://host/ask"} (the {"verb", "url"} form never matches)',
            )
    return api


def read_plan_ids(value: str) -> list[str]:
    """``--payment-plans``: ``id1,id2`` or a JSON array of ids."""
    text = value.strip()
    if text.startswith("["):
        try:
            items = json.loads(text)
        except ValueError:
            raise bad("--payment-plans", "is not a valid JSON array") from None
        if not isinstance(items, list) or not all(isinstance(i, str) and i for i in items):
            raise bad("--payment-plans", "must be a JSON array of plan ids (strings)")
        ids = [item.strip() for item in items]
    else:
        ids = [part.strip() for part in text.split(",") if part.strip()]
    if not ids:
        raise bad("--payment-plans", "name at least one plan id")
    return ids


@agents.command("register-agent")
@click.option(
    "--agent-metadata",
    metavar="JSON",
    callback=json_input,
    required=True,
    help='Agent metadata JSON, e.g. {"name": "Weather"} (file, text or -).',
)
@click.option(
    "--agent-api",
    metavar="JSON",
    callback=json_input,
    required=True,
    help='Agent API JSON, e.g. {"endpoints": [{"POST": "https://host/ask"}]}.',
)
@click.option(
    "--payment-plans", required=True, help="Plan ids sold with it: id1,id2 or a JSON array."
)
@global_options
@pass_session
def register_agent(
    session: Session, agent_metadata: dict[str, Any], agent_api: dict[str, Any], payment_plans: str
) -> None:
    """Register an agent that sells the given plans."""
    metadata = load_model(AgentMetadata, agent_metadata, "--agent-metadata")
    api = read_agent_api(agent_api)
    plan_ids = read_plan_ids(payment_plans)
    _, answer = session.call(lambda c: c.register_agent(metadata, api, plan_ids))
    session.output().result(answer)


@agents.command("register-agent-and-plan")
@click.option(
    "--agent-metadata",
    metavar="JSON",
    callback=json_input,
    required=True,
    help="Agent metadata JSON.",
)
@click.option(
    "--agent-api", metavar="JSON", callback=json_input, required=True, help="Agent API JSON."
)
@click.option(
    "--plan-metadata",
    metavar="JSON",
    callback=json_input,
    required=True,
    help="Plan metadata JSON.",
)
@click.option(
    "--price-config", metavar="JSON", callback=json_input, required=True, help="Price config JSON."
)
@click.option(
    "--credits-config",
    metavar="JSON",
    callback=json_input,
    required=True,
    help="Credits config JSON.",
)
@global_options
@pass_session
def register_agent_and_plan(
    session: Session,
    agent_metadata: dict[str, Any],
    agent_api: dict[str, Any],
    plan_metadata: dict[str, Any],
    price_config: dict[str, Any],
    credits_config: dict[str, Any],
) -> None:
    """Register a new plan and an agent selling it, in one call."""
    metadata = load_model(AgentMetadata, agent_metadata, "--agent-metadata")
    api = read_agent_api(agent_api)
    plan, price, credits = read_plan_inputs(plan_metadata, price_config, credits_config, None)
    _, answer = session.call(
        lambda c: c.register_agent_and_plan(metadata, api, plan, price, credits)
    )
    session.output().result(answer)


@agents.command("get-agent")
@click.argument("agent_id")
@global_options
@pass_session
def get_agent(session: Session, agent_id: str) -> None:
    """Show one agent (public)."""
    _, answer = session.call(lambda c: c.get_agent_document(agent_id), auth=False)
    session.output().result(answer)


@agents.command("get-agents")
@listing_options("Agents")
@global_options
@pass_session
def get_agents(
    session: Session, page: int, offset: int, sort_by: str | None, sort_order: str
) -> None:
    """List your own agents."""
    _, answer = session.call(lambda c: c.list_agents(page, offset, sort_by, sort_order))
    session.output().result(answer, items="agents", columns=AGENT_COLUMNS)


@agents.command("get-agent-plans")
@click.argument("agent_id")
@listing_options("Plans", sort=False)
@global_options
@pass_session
def get_agent_plans(session: Session, agent_id: str, page: int, offset: int) -> None:
    """List the plans an agent sells (public)."""
    _, answer = session.call(lambda c: c.get_agent_plans(agent_id, page, offset), auth=False)
    session.output().result(answer, items="plans", columns=PLAN_COLUMNS)
