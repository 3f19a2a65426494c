"""What svc_queryAgent was asked to buy: the parameters buying reads (tools/ declares the model)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


class AgentQuery(Protocol):
    """The tool's validated parameters, read-only; ``tools.query.QueryAgentParams`` is one."""

    @property
    def agent_url(self) -> str: ...
    @property
    def prompt(self) -> str: ...
    @property
    def tool_name(self) -> str | None: ...
    @property
    def arguments(self) -> dict[str, Any] | None: ...
    @property
    def list_tools(self) -> bool: ...
    @property
    def plan_id(self) -> str | None: ...
    @property
    def agent_id(self) -> str | None: ...
    @property
    def payment_type(self) -> str | None: ...
    @property
    def payment_method_id(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class AtUrl:
    """A query sent to another URL than the one asked (the A2A interface the card at the asked
    address names), everything else as asked."""

    agent_url: str
    prompt: str
    tool_name: str | None
    arguments: dict[str, Any] | None
    list_tools: bool
    plan_id: str | None
    agent_id: str | None
    payment_type: str | None
    payment_method_id: str | None

    @classmethod
    def of(cls, p: AgentQuery, url: str) -> AtUrl:
        return cls(
            url,
            p.prompt,
            p.tool_name,
            p.arguments,
            p.list_tools,
            p.plan_id,
            p.agent_id,
            p.payment_type,
            p.payment_method_id,
        )
