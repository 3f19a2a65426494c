"""Plugin configuration: ``PluginConfig``, loading it, and the service URLs it resolves to.

``PluginConfig``'s camelCase aliases *are* the manifest's ``configSchema`` (a test checks that
the two agree). Errors name the field and never echo a secret. :class:`ConfigError` (from
:mod:`.api_keys`) and :func:`check_base_url` (from :mod:`.environments`) are re-exported here.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from .api_keys import KEY_PREFIXES, ApiKey, normalize_version, parse_api_key
from .api_keys import ConfigError as ConfigError  # re-exported: config and keys share it
from .environments import ENVIRONMENTS as ENVIRONMENTS  # re-exported, as ConfigError
from .environments import base_url_from_env
from .environments import check_base_url as check_base_url  # re-exported for svc's base-url
from .suggest import did_you_mean

Environment = Literal["sandbox", "live", "local"]
PaymentType = Literal["crypto", "fiat"]

DEFAULT_API_VERSION = "1.1"
DEFAULT_NETWORK = {"sandbox": "eip155:84532", "live": "eip155:8453", "local": "eip155:84532"}


class PlanRef(BaseModel):
    """A plan the balance context reports on."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    plan_id: str = Field(alias="planId", min_length=1, description="Plan id")
    name: str | None = Field(default=None, description="Display name shown in the context line")
    payment_type: PaymentType = Field(
        default="crypto", alias="paymentType", description="How this plan is paid"
    )


class PluginConfig(BaseModel):
    """The plugin's configuration section (camelCase keys, as in manifest.json)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    svc_api_key: SecretStr | None = Field(
        default=None,
        alias="svcApiKey",
        description="API key <environment>:<token>; wins over a key stored by /svc_login",
    )
    environment: Environment = Field(
        default="sandbox",
        description=(
            "sandbox, live, or local (the embedded sandbox; needs baseUrl); its service URL is "
            "baseUrl, else $SVC_SANDBOX_BASE_URL or $SVC_LIVE_BASE_URL"
        ),
    )
    base_url: str | None = Field(
        default=None,
        alias="baseUrl",
        description="REST root ending in /api/v1; overrides the environment's base URL",
    )
    frontend_url: str | None = Field(
        default=None,
        alias="frontendUrl",
        description="Web app root used by the browser login flow",
    )
    plan_id: str | None = Field(default=None, alias="planId", description="Default plan id")
    agent_id: str | None = Field(default=None, alias="agentId", description="Default agent id")
    plans: list[PlanRef] = Field(
        default_factory=list, description="Plans shown in the balance context"
    )
    credits_per_request: int = Field(
        default=1, alias="creditsPerRequest", ge=1, description="Credits burned per paid request"
    )
    enable_paid_endpoint: bool = Field(
        default=False, alias="enablePaidEndpoint", description="Serve the paid agent endpoint"
    )
    agent_endpoint_path: str = Field(
        default="/svc/agent", alias="agentEndpointPath", description="Path of the paid endpoint"
    )
    agent_handler: str | None = Field(
        default=None,
        alias="agentHandler",
        description="module:function answering paid requests ({prompt} -> JSON)",
    )
    payment_type: PaymentType = Field(
        default="crypto", alias="paymentType", description="Default payment type for queries"
    )
    default_spending_limit_cents: int = Field(
        default=10000,
        alias="defaultSpendingLimitCents",
        ge=1,
        description="Spending cap of delegations the plugin creates, in cents",
    )
    default_delegation_duration_secs: int = Field(
        default=7 * 24 * 3600,
        alias="defaultDelegationDurationSecs",
        ge=60,
        description="Lifetime of delegations the plugin creates, in seconds",
    )
    api_version: str = Field(
        default=DEFAULT_API_VERSION,
        alias="apiVersion",
        description="Service-Version sent on every request (MAJOR.MINOR)",
    )
    request_timeout_secs: float = Field(
        default=60.0, alias="requestTimeoutSecs", gt=0, le=600, description="Per-request timeout"
    )
    paid_endpoint_host: str = Field(
        default="127.0.0.1", alias="paidEndpointHost", description="Bind address of the endpoint"
    )
    paid_endpoint_port: int = Field(
        default=8402,
        alias="paidEndpointPort",
        ge=0,
        le=65535,
        description="Port of the paid endpoint when the plugin serves it (0 = any free port)",
    )
    enable_paid_mcp: bool = Field(
        default=False,
        alias="enablePaidMcp",
        description="Sell the agent as the paid MCP tool 'ask' (needs the mcp extra)",
    )
    paid_mcp_port: int = Field(
        default=8403,
        alias="paidMcpPort",
        ge=0,
        le=65535,
        description="Port of the paid MCP server when the plugin serves it (0 = any free port)",
    )
    enable_paid_a2a: bool = Field(
        default=False,
        alias="enablePaidA2A",
        description="Sell the agent over A2A 1.x with the official a2a-sdk server, paid in band "
        "(the a2a extra)",
    )
    paid_a2a_port: int | None = Field(
        default=None,
        alias="paidA2APort",
        ge=0,
        le=65535,
        description="Port of the paid A2A agent, on paidEndpointHost (0 = any free port of its "
        "own). Unset, or equal to paidEndpointPort: the paid endpoint's own port when the plugin "
        "serves the endpoint; else 8404",
    )
    paid_a2a_public_url: str | None = Field(
        default=None,
        alias="paidA2APublicUrl",
        description="Public origin of the paid A2A agent, when behind a proxy (its card's "
        "interface URLs start with it)",
    )
    mcp_server_name: str = Field(
        default="svc-agent",
        alias="serverName",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$",
        description="The MCP server's name, used in logical URIs mcp://<serverName>/tools/<name>",
    )
    paid_endpoint_public_url: str | None = Field(
        default=None,
        alias="paidEndpointPublicUrl",
        description="Public URL of the paid endpoint, when behind a proxy",
    )
    max_body_bytes: int = Field(
        default=64 * 1024,
        alias="maxBodyBytes",
        ge=1024,
        description="Largest request body the paid endpoint accepts",
    )
    paid_budget_secs: float = Field(
        default=10.0,
        alias="paidBudgetSecs",
        gt=0,
        le=600,
        description="Paid endpoint: time allowed for the service calls before the handler "
        "(plan, balance, verify) and again for settling; over it the request gets 503",
    )
    handler_timeout_secs: float = Field(
        default=30.0,
        alias="handlerTimeoutSecs",
        gt=0,
        le=3600,
        description="Paid endpoint: longest the agent handler may run (then 504, not charged)",
    )
    idempotency_ttl_secs: float = Field(86400.0, alias="idempotencyTtlSecs", gt=0, le=2592000,
        description="Selling: how long a paid answer is kept for retries with its key")  # fmt: skip
    idempotency_max_entries: int = Field(4096, alias="idempotencyMaxEntries", ge=1, le=10**7,
        description="Selling without stateUrl: idempotency keys kept at most (LRU)")  # fmt: skip
    idempotency_max_answer_bytes: int = Field(65536, alias="idempotencyMaxAnswerBytes", ge=0,
        le=2**26, description="Selling: largest answer kept for retries")  # fmt: skip
    paid_header_timeout_secs: float = Field(
        default=10.0,
        alias="paidHeaderTimeoutSecs",
        gt=0,
        le=600,
        description="Paid endpoint's own server: a connection must send its request headers "
        "within this time (and idle keep-alive connections close after it)",
    )
    settle_queue_path: str | None = Field(
        default=None,
        alias="settleQueuePath",
        description="File of settles to retry after an outage (default: settle-queue.json in "
        "the plugin's config directory)",
    )
    state_url: str | None = Field(
        default=None,
        alias="stateUrl",
        description="Redis URL (redis://host:6379/0, rediss://, unix://) where several replicas "
        "of the paid endpoint share admission, settle queue and stats; empty = in-process "
        "(needs the redis extra)",
    )

    per_user_accounts: bool = Field(
        default=False,
        alias="perUserAccounts",
        description="Hosted gateway: each chat user the host names acts with their own account "
        "(their own key, or a white-label customer account the operator's organization opens "
        "for them with their consent), never the operator's",
    )
    operator_ids: list[str] = Field(
        default_factory=list,
        alias="operatorIds",
        description="Chat users (channel:sender, e.g. telegram:12345) who act as the "
        "operator: the gateway's own account, /svc_earnings",
    )
    organization_id: str | None = Field(
        default=None,
        alias="organizationId",
        description="Organization that onboards chat users (X-Current-Org-Id); default: the "
        "operator key's own",
    )
    customer_email_domain: str = Field(
        default="chat-users.svc-gateway.invalid",
        alias="customerEmailDomain",
        pattern=r"^[A-Za-z0-9](?:[A-Za-z0-9.-]{0,200})$",
        description="Domain of the address each onboarded chat user is registered under "
        "(<channel>.<sender>@<domain>; the same user always gets the same account)",
    )
    metered_tools: dict[str, int | str] = Field(
        default_factory=dict,
        alias="meteredTools",
        description="The host's own tools charged per call: name or glob -> credits (an int) "
        'or "module:function" (tool name, arguments) -> credits; svc_* tools are never metered',
    )
    metering_plan_id: str | None = Field(
        default=None,
        alias="meteringPlanId",
        description="Plan metered tool calls are charged on (default: planId)",
    )

    approval: Literal["human", "model"] = Field(
        default="human",
        description="Who approves a purchase: human (the person's own /svc_approve <code>, or "
        "a spending mandate they set with /svc_allow; a host that cannot deliver commands runs "
        "as model) or model (confirm: true places the order, for headless agents)",
    )
    approval_ttl_secs: int = Field(
        default=600,
        alias="approvalTtlSecs",
        ge=10,
        description="How long a pending purchase's approval code stays valid, in seconds",
    )
    max_user_spend_per_day: float | None = Field(
        default=None,
        alias="maxUserSpendPerDay",
        gt=0,
        description="Operator's cap, in USD per day, on what any user's spending mandates "
        "(/svc_allow) may spend on this gateway; empty = no cap",
    )

    allowed_agent_hosts: list[str] = Field(
        default_factory=list,
        alias="allowedAgentHosts",
        description="Private-network hosts, IP addresses or CIDR ranges svc_queryAgent may pay "
        "(e.g. agent.internal, 10.0.0.0/8); loopback is always allowed, other private, "
        "link-local and unspecified addresses are refused",
    )

    @field_validator("allowed_agent_hosts")
    @classmethod
    def _agent_hosts(cls, value: list[str]) -> list[str]:
        for entry in value:
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                if not re.fullmatch(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})", entry):
                    raise ValueError(
                        f"{entry[:60]!r} is neither a host name nor an IP address or range"
                    ) from None
        return [entry.lower() for entry in value]

    @field_validator("metered_tools")
    @classmethod
    def _metered(cls, value: dict[str, int | str]) -> dict[str, int | str]:
        for pattern, price in value.items():
            if not pattern.strip():
                raise ValueError("a tool name or glob must not be empty")
            if isinstance(price, bool) or (isinstance(price, int) and price < 1):
                raise ValueError(f"{pattern[:60]}: credits must be a positive integer")
            if isinstance(price, str) and not re.fullmatch(r"[\w.]+:[\w.]+", price):
                raise ValueError(f"{pattern[:60]}: must be an integer or module:function")
        return value

    @field_validator("base_url", "frontend_url", "paid_endpoint_public_url", "paid_a2a_public_url")
    @classmethod
    def _http_url(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None or info.field_name == "base_url":
            return None if value is None else check_base_url(value)
        value = value.strip().rstrip("/")
        if not re.match(r"^https?://[^/\s]+", value):
            raise ValueError("must be an http(s) URL")
        return value

    @field_validator("state_url")
    @classmethod
    def _state_url(cls, value: str | None) -> str | None:
        value = (value or "").strip()
        if not value:
            return None
        if not re.match(r"^(redis|rediss|unix)://\S+$", value):
            # the value is not quoted back: a Redis URL may carry a password
            raise ValueError(
                "must be a redis://, rediss:// or unix:// URL (e.g. redis://127.0.0.1:6379/0)"
            )
        return value

    @field_validator("agent_endpoint_path")
    @classmethod
    def _path(cls, value: str) -> str:
        if not re.fullmatch(r"/[A-Za-z0-9._~\-/]*", value) or (
            value.endswith("/") and value != "/"
        ):
            raise ValueError("must be a path such as /svc/agent")
        return value

    @field_validator("api_version")
    @classmethod
    def _version(cls, value: str) -> str:
        normalized = normalize_version(value)
        if normalized is None:
            raise ValueError("must look like 1.1")
        return normalized

    @field_validator("agent_handler")
    @classmethod
    def _handler(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[\w.]+:[\w.]+", value):
            raise ValueError("must be module:function")
        return value

    @field_validator("svc_api_key")
    @classmethod
    def _key(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or not value.get_secret_value().strip():
            return None
        parse_api_key(value)  # raises ConfigError (a ValueError) without echoing the key
        return value

    @model_validator(mode="before")
    @classmethod
    def _environment_from_key(cls, data: Any) -> Any:
        """No ``environment`` given: the one ``svcApiKey`` names (else the default)."""
        if isinstance(data, dict) and "environment" not in data:
            raw = data.get("svcApiKey", data.get("svc_api_key"))
            text = raw.get_secret_value() if isinstance(raw, SecretStr) else raw
            if isinstance(text, str) and ":" in text:
                env = KEY_PREFIXES.get(text.strip().split(":", 1)[0].lower(), (None, None))[0]
                if env is not None:
                    return {**data, "environment": env}
        return data

    @model_validator(mode="after")
    def _key_matches_environment(self) -> PluginConfig:
        """A key for another environment is never sent anywhere: refuse it at start."""
        key = self.api_key
        if key is not None and key.environment not in (None, self.environment):
            raise ValueError(
                f"svcApiKey is a key for the {key.environment} environment, but this gateway is "
                f"configured for {self.environment}: use a {self.environment} key, or set "
                f"environment to {key.environment}"
            )
        return self

    @model_validator(mode="after")
    def _local_needs_url(self) -> PluginConfig:
        if self.environment == "local" and self.base_url is None:
            raise ValueError("environment 'local' needs baseUrl (the embedded sandbox's URL)")
        return self

    # -- derived values -------------------------------------------------------------------

    @property
    def api_key(self) -> ApiKey | None:
        return parse_api_key(self.svc_api_key) if self.svc_api_key is not None else None

    def plan_refs(self) -> list[PlanRef]:
        """The plans the context reports on: ``plans``, else the default ``planId``."""
        if self.plans:
            return list(self.plans)
        if self.plan_id:
            return [PlanRef(plan_id=self.plan_id, payment_type=self.payment_type)]
        return []


def resolve_base_url(config: PluginConfig, environment: str) -> str:
    """The REST root for an environment: ``baseUrl`` wins, then ``SVC_<ENV>_BASE_URL``."""
    return config.base_url or base_url_from_env(environment)


def _describe(error: ValidationError) -> str:
    parts = []  # the fields' own words, and for a key no field has, the nearest one
    for item in error.errors(include_url=False, include_input=False, include_context=False):
        where = ".".join(str(p) for p in item["loc"]) or "config"
        message = str(item["msg"]).removeprefix("Value error, ")
        if item["type"] == "extra_forbidden" and len(item["loc"]) == 1:
            keys = (f.alias or n for n, f in PluginConfig.model_fields.items())
            message = f"not a setting of the svc plugin.{did_you_mean(where, keys)}"
        parts.append(f"{where}: {message}")
    return "; ".join(parts)


def load_config(raw: Mapping[str, Any] | None) -> PluginConfig:
    """Validate a host's config section; raise :class:`ConfigError` naming the bad field."""
    try:
        return PluginConfig.model_validate(dict(raw or {}))
    except ValidationError as error:
        raise ConfigError(f"Invalid svc plugin config: {_describe(error)}") from None


def config_schema() -> dict[str, Any]:
    """The JSON Schema of the config, as manifest.json's ``configSchema`` carries it."""
    return PluginConfig.model_json_schema(by_alias=True)
