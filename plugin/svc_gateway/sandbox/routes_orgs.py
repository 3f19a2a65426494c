"""Routes of the organizations group (payments_py ``api/organizations_api.py``)."""

from __future__ import annotations

from aiohttp import web

from . import organizations as orgs
from . import validation as v
from .context import API_PREFIX, caller, ok, store_of

routes = web.RouteTableDef()
ORGS = API_PREFIX + "/organizations"


def org_header(request: web.Request) -> str | None:
    return request.headers.get(orgs.ORG_HEADER) or None


@routes.get(ORGS + "/my-memberships")
async def my_memberships(request: web.Request) -> web.Response:
    account = caller(request)
    return ok(orgs.my_memberships(store_of(request), account.address))


@routes.post(ORGS + "/members")
async def members(request: web.Request) -> web.Response:
    account = caller(request)
    body = await v.read_json(request, optional=True)
    return ok(orgs.members(store_of(request), account.address, org_header(request), body))


@routes.post(ORGS + "/account")
async def enrol(request: web.Request) -> web.Response:
    """A white-label customer (``{"email", "as": "customer"}``) or a member
    (``{"uniqueExternalId", "email"?, "role"?}``): a new account and its API key."""
    account = caller(request)
    body = await v.read_json(request)
    status, answer = orgs.enrol(store_of(request), account.address, org_header(request), body)
    return ok(answer, status=status)


@routes.get(ORGS + "/{orgId}/activity")
async def activity(request: web.Request) -> web.Response:
    account = caller(request)
    org_id = v.identifier(request.match_info["orgId"], "orgId")
    query = dict(request.query)
    return ok(orgs.activity(store_of(request), account.address, org_id, query))
