"""Which requests are sold, and for how much: ``RouteConfig`` and the ``"METHOD /path"`` map.

SPEC.md ("Gating middleware for agent deployments"): a route map key is ``"METHOD /path"``;
path parameters written ``{param}`` or ``:param`` match one path segment, by position. A
request that matches no entry passes through ungated.

A request is matched on what aiohttp's router dispatched it to (:func:`dispatched`), never on
a parse of its own of the request path: ``/docs/q3%2Freport/summary`` is the route
``/docs/{doc_id}/summary`` with ``doc_id = "q3/report"`` for the router, so it is for the gate.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from aiohttp import web

from ...config import ConfigError
from ...safe_text import plural
from ...service.models import Scheme

if TYPE_CHECKING:
    from ..flow.plans import PlanFacts

#: credits of one request: a fixed number, or a function of the request (sync or async): an
#: aiohttp ``web.Request`` on an aiohttp app, a Starlette ``Request`` on an ASGI app
RouteCredits = int | Callable[[Any], "int | Awaitable[int]"]

_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "*"})
_SCHEMES = ("svc:erc4337", "svc:card-delegation")
_PARAM = re.compile(r"^(?:\{[A-Za-z_][A-Za-z0-9_]*\}|:[A-Za-z_][A-Za-z0-9_]*)$")
#: a variable in an aiohttp resource's canonical path (``DynamicResource`` writes ``{name}``)
_VAR = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
#: what the router dispatched: the resource's path slots (a variable's value is one slot,
#: whatever it holds) and the same with each value split at its ``/`` (a ``{tail:.*}``)
Dispatched = tuple[tuple[str, ...], tuple[str, ...]]


@dataclass(frozen=True)
class RouteConfig:
    """How one route is sold (SPEC.md's RouteConfig table, field for field)."""

    plan_id: str
    credits: RouteCredits = 1
    agent_id: str | None = None
    network: str | None = None
    scheme: str | None = None
    description: str | None = None
    mime_type: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.plan_id, str) or not self.plan_id.strip():
            raise ConfigError("RouteConfig.plan_id must be a non-empty plan id string")
        credits = self.credits
        if isinstance(credits, bool) or not (isinstance(credits, int) or callable(credits)):
            raise ConfigError(
                "RouteConfig.credits must be an int or a function of the request returning one"
            )
        if isinstance(credits, int) and credits < 0:
            raise ConfigError("RouteConfig.credits must not be negative")
        if self.scheme is not None and self.scheme not in _SCHEMES:
            raise ConfigError(f"RouteConfig.scheme must be one of {', '.join(_SCHEMES)}")
        for name in ("agent_id", "network", "description", "mime_type"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise ConfigError(f"RouteConfig.{name} must be a string or None")

    @property
    def scheme_override(self) -> Scheme | None:
        scheme: Scheme | None = self.scheme  # type: ignore[assignment]  # checked above
        return scheme

    async def price(self, request: Any) -> int:
        """The credits this request costs; a function's exception propagates (answered 500)."""
        credits = self.credits
        if isinstance(credits, int):
            return credits
        value = credits(request)
        if inspect.isawaitable(value):
            value = await value
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError("the route's credits function must return an int")
        return value

    @classmethod
    def coerce(cls, value: RouteConfig | Mapping[str, Any]) -> RouteConfig:
        """A ``RouteConfig`` or a plain dict of its fields (snake_case or camelCase)."""
        if isinstance(value, RouteConfig):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError("each route maps to a RouteConfig or a dict of its fields")
        known = {f.name for f in fields(cls)}
        camel = {"planId": "plan_id", "agentId": "agent_id", "mimeType": "mime_type"}
        args: dict[str, Any] = {}
        for key, item in value.items():
            name = camel.get(key, key)
            if name not in known:
                raise ConfigError(f"unknown RouteConfig field {key!r}")
            args[name] = item
        if "plan_id" not in args:
            raise ConfigError("a route needs a plan_id")
        return cls(**args)


@dataclass(frozen=True)
class Route:
    """One entry of the map: ``key`` as written, its method and its path segments."""

    key: str
    method: str
    segments: tuple[str | None, ...]  # None: a parameter (any one segment)
    config: RouteConfig

    @property
    def fixed_credits(self) -> int | None:
        """The route's price when it is a fixed number (``None``: a function of the request)."""
        credits = self.config.credits
        return credits if isinstance(credits, int) else None

    def sale(self) -> dict[str, Any]:
        """What every :class:`PaidRequest` of this route carries, whatever the request: decided
        once when the map is built, not on each request."""
        config = self.config
        return {
            "plan_id": config.plan_id,
            "agent_id": config.agent_id,
            "scheme": config.scheme_override,
            "network": config.network,
            "description": config.description,
            "mime_type": config.mime_type,
            "route": self.key,
        }

    def matches(self, method: str, parts: tuple[str, ...]) -> bool:
        if self.method not in ("*", method) or len(parts) != len(self.segments):
            return False
        pairs = zip(self.segments, parts, strict=True)
        return all(want is None or want == got for want, got in pairs)


def _split(path: str) -> tuple[str, ...]:
    return tuple(part for part in path.split("/") if part)


#: resources with a plain path (no variable, not static) whose :func:`dispatched` is kept
PLAIN_KEPT = 256


def dispatched(request: web.Request) -> Dispatched | None:
    """The path aiohttp's router resolved this request to, as path segments: the matched
    resource's canonical path with each ``{name}`` replaced by the value its handler gets in
    ``match_info``. ``None`` when the router matched nothing (its 404/405 runs, no handler).

    Two views: a variable's value as one segment, as the router matched it (an encoded
    ``%2F`` does not split it), and the same with values split at ``/`` (a variable with a
    regex such as ``{tail:.*}`` spans segments)."""
    info = request.match_info
    if getattr(info, "http_exception", None) is not None:
        return None
    resource = info.route.resource
    if resource is None:
        return None
    values: Mapping[str, str] = info
    slots: list[str] = []
    spread: list[str] = []
    for segment in _split(resource.canonical):
        whole = _VAR.fullmatch(segment)
        if whole is not None:
            value = values.get(whole[1], "")
            slots.append(value)
            spread.extend(_split(value))
        elif "{" in segment:  # variables inside a segment: "report.{ext}"
            value = _VAR.sub(lambda m: values.get(m[1], ""), segment)
            slots.append(value)
            spread.extend(_split(value))
        else:
            slots.append(unquote(segment))
            spread.append(unquote(segment))
    if isinstance(resource, web.StaticResource):  # the file path below its prefix
        tail = _split(values.get("filename", ""))
        slots.extend(tail)
        spread.extend(tail)
    return tuple(slots), tuple(spread)


def is_plain(resource: web.AbstractResource) -> bool:
    """A resource whose path has no variable (not a static directory): every request the
    router dispatches to it has the same segments."""
    return "{" not in resource.canonical and not isinstance(resource, web.StaticResource)


def out_of_range(route: Route, credits: int, facts: PlanFacts) -> str | None:
    """The warning for a route priced outside its plan's per-request credit range (the flow
    charges the nearest bound, :meth:`PlanFacts.clamp`), or ``None`` when the price fits."""
    if facts.min_amount is None and facts.max_amount is None:
        return None  # the plan could not be read: nothing to compare with
    charged = facts.clamp(credits)
    if charged == credits:
        return None
    low, high = facts.min_amount or 0, facts.max_amount
    allowed = f"{low}–{high}" if high is not None and high >= low else f"at least {low}"
    return (
        f"route {route.key!r} asks {plural(credits, 'credit')} per request, but plan "
        f"{facts.plan_id} allows {allowed} per request: each request will be charged "
        f"{plural(charged, 'credit')}. Set the route's credits within {allowed}, or sell it "
        "under a plan whose range includes its price."
    )


def parse_route(key: str, config: RouteConfig | Mapping[str, Any]) -> Route:
    """``"POST /runs/{run_id}"`` → a :class:`Route`; a clear ConfigError on a bad key."""
    method, _, path = key.strip().partition(" ")
    method, path = method.upper(), path.strip()
    if method not in _METHODS or not path.startswith("/"):
        raise ConfigError(
            f"route key {key!r} must be 'METHOD /path', e.g. 'POST /runs/wait' (methods: "
            "GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS or *)"
        )
    segments = tuple(None if _PARAM.match(part) else part for part in _split(path))
    return Route(key.strip(), method, segments, RouteConfig.coerce(config))


class RouteMap:
    """The gated routes; exact segments beat parameters when two entries could match."""

    def __init__(self, routes: Mapping[str, RouteConfig | Mapping[str, Any]]) -> None:
        if not isinstance(routes, Mapping):
            raise ConfigError('routes must map "METHOD /path" to a RouteConfig')
        parsed = [parse_route(key, config) for key, config in routes.items()]
        # more literal segments first: "/runs/wait" wins over "/runs/{id}"
        self.routes = sorted(parsed, key=lambda r: -sum(s is not None for s in r.segments))
        #: (method, segments) → entry, every path matched (those with variables are
        #: unbounded in number: kept at most 4096)
        self._hits: dict[tuple[str, tuple[str, ...]], Route | None] = {}
        #: (method, resource) → entry, for resources whose path has no variable: their entry
        #: is the same on every request, found without building their segments again
        self._by_resource: dict[tuple[str, object], Route | None] = {}

    def match(self, method: str, path: str | tuple[str, ...]) -> Route | None:
        """The entry for ``method`` on ``path`` (a path, or its segments as :func:`dispatched`
        gives them)."""
        parts = _split(path) if isinstance(path, str) else path
        cached = (method, parts)
        if cached in self._hits:
            return self._hits[cached]
        found = next((r for r in self.routes if r.matches(method, parts)), None)
        if len(self._hits) >= 4096:  # paths with parameters are unbounded: keep it small
            self._hits.clear()
        self._hits[cached] = found
        return found

    def dispatched(self, method: str, request: web.Request) -> Route | None:
        """The entry for ``method`` on the route aiohttp's router dispatched ``request`` to
        (:func:`dispatched`): its one-slot view first, then its values split at ``/``."""
        resource = request.match_info.route.resource
        key = (method, resource)
        if resource is not None and key in self._by_resource:
            return self._by_resource[key]
        resolved = dispatched(request)
        if resolved is None:
            return None
        slots, spread = resolved
        found = self.match(method, slots)
        if found is None and spread != slots:
            found = self.match(method, spread)
        if resource is not None and is_plain(resource):  # this answer holds for every request
            if len(self._by_resource) >= PLAIN_KEPT:
                self._by_resource.clear()
            self._by_resource[key] = found
        return found

    def __len__(self) -> int:
        return len(self.routes)
