"""Hosted-gateway fixtures: the sandbox with the organizations onboarding route.

Until the sandbox serves ``POST /organizations/account`` itself (the faithful-sandbox issue, part
G), a shim adds it here: the shapes are payments-py 1.18's ``OrganizationsAPI.onboard_customer``
(body ``{"email", "as": "customer"}``; answer ``{"walletResult": {"hash": "<env>:<jwt>",
"userId", "userWallet", "isCustomer", "customerRecorded"}}``, 201), and a returning customer
(the same organization, the same email) gets a new key for the same account. When the sandbox
has the route, the shim stands aside and the sandbox answers.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from svc_gateway.sandbox import SandboxServer
from svc_gateway.sandbox.app import create_app
from svc_gateway.sandbox.context import API_PREFIX, STORE
from svc_gateway.sandbox.server import PathOnlyAccessLogger

ONBOARD_PATH = API_PREFIX + "/organizations/account"


def _has_route(app: web.Application, method: str, path: str) -> bool:
    for resource in app.router.resources():
        if resource.canonical == path:
            return any(route.method == method for route in resource)
    return False


def _add_onboarding_shim(app: web.Application) -> None:
    from svc_gateway.sandbox import accounts
    from svc_gateway.sandbox.context import caller
    from svc_gateway.sandbox.errors import bad_request

    customers: dict[tuple[str, str], str] = {}

    async def onboard(request: web.Request) -> web.Response:
        admin = caller(request)
        body = await request.json()
        email = body.get("email")
        if not isinstance(email, str) or "@" not in email or body.get("as") != "customer":
            raise bad_request("email is required and as must be 'customer'")
        store = app[STORE]
        address = customers.get((admin.address, email.lower()))
        if address is None:
            made = accounts.create_account(store, f"customer {email}")
            address = made["address"]
            key = made["apiKey"]
            customers[(admin.address, email.lower())] = address
        else:
            with store.tx():
                key = accounts._issue_key(store, address, admin.pinned_version, time.time())
        wallet = {
            "hash": key,
            "userId": f"us-{address[2:14]}",
            "userWallet": address,
            "isCustomer": True,
            "customerRecorded": True,
        }
        return web.json_response({"walletResult": wallet}, status=201)

    app.router.add_post(ONBOARD_PATH, onboard)


@pytest.fixture
async def sandbox() -> AsyncIterator[SandboxServer]:
    app = create_app()
    if not _has_route(app, "POST", ONBOARD_PATH):
        _add_onboarding_shim(app)
    runner = web.AppRunner(app, access_log_class=PathOnlyAccessLogger)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    server = SandboxServer(runner, app, f"http://{host}:{port}")
    yield server
    await server.close()
