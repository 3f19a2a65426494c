"""What every state backend shares: the outage error, how a ``stateUrl`` is shown, how long a
claim lives. Imported by the Redis modules and the flow; it imports neither."""

from __future__ import annotations

from ...config import PluginConfig
from ...redact import describe_state_url as describe_state_url  # re-exported
from ...service.errors import ServiceUnavailable
from ...service.seller import SellerSettings


class StateUnavailable(ServiceUnavailable):
    """The shared state store (Redis) did not answer: admission fails closed (503)."""

    default_hint = "The agent's shared state store is unreachable; retry in a few seconds."

    def __init__(self, where: str, exc: BaseException) -> None:
        super().__init__(
            f"the shared state store at {where} did not answer ({type(exc).__name__})",
            code="state_unavailable",
        )


def claim_ttl_secs(config: PluginConfig | SellerSettings) -> float:
    """How long a request may hold its claim: admission and settle budgets, the handler's
    deadline, and a margin; a replica that dies frees its payers' credits after it."""
    return 2 * config.paid_budget_secs + config.handler_timeout_secs + 5.0
