"""Routes for paying: fiat checkout, payment methods, delegations, x402 tokens, verify/settle,
plus the sandbox's own account and ledger routes and version discovery.
"""

from __future__ import annotations

from aiohttp import web

from . import accounts
from . import delegations as dg
from . import validation as v
from .context import API_PREFIX, caller, ok, origin_of, resolution_of, store_of
from .errors import MPP_NOT_CONFIGURED, ApiError, bad_request
from .facilitator import settle, verify
from .ledger import create_checkout, ledger_view
from .permissions import issue_token
from .plans import require_plan
from .tokens import contract_address
from .versioning import CURRENT, discovery

routes = web.RouteTableDef()
A = API_PREFIX


@routes.post(A + "/fiat/stripe/payment")
async def fiat_payment(request: web.Request) -> web.Response:
    account = caller(request)
    body = await v.read_json(request)
    if body.get("planId") is None:
        raise bad_request("planId is required")
    plan_id = v.identifier(body.get("planId"), "planId")
    session_type = v.text(body, "sessionType", required=False, max_len=32)
    if session_type is not None and session_type not in ("embedded", "hosted"):
        raise bad_request("sessionType must be 'embedded' or 'hosted'")
    store = store_of(request)
    plan = require_plan(store, plan_id)
    return ok({"result": create_checkout(store, plan, account.address, origin_of(request))})


@routes.get(A + "/payment-methods")
async def payment_methods(request: web.Request) -> web.Response:
    account = caller(request)
    provider = request.query.get("provider") or None
    return ok(accounts.payment_methods(store_of(request), account.address, provider))


@routes.patch(A + "/payment-methods/{methodId}")
async def update_payment_method(request: web.Request) -> web.Response:
    account = caller(request)
    body = await v.read_json(request)
    item = accounts.update_payment_method(
        store_of(request), account.address, request.match_info["methodId"], body
    )
    return ok(item)


@routes.post(A + "/delegation/create")
async def create_delegation(request: web.Request) -> web.Response:
    account = caller(request)
    body = await v.read_json(request)
    delegation_id = dg.create_delegation(store_of(request), account.address, body)
    return ok({"delegationId": delegation_id}, status=201)


@routes.get(A + "/delegation")
async def list_delegations(request: web.Request) -> web.Response:
    account = caller(request)
    return ok(dg.list_delegations(store_of(request), account.address))


@routes.post(A + "/x402/permissions")
async def create_token(request: web.Request) -> web.Response:
    account = caller(request)
    body = await v.read_json(request)
    return ok({"accessToken": issue_token(store_of(request), account.address, body)})


@routes.post(A + "/x402/verify")
async def verify_permissions(request: web.Request) -> web.Response:
    caller(request)
    body = await v.read_json(request)
    return ok(verify(store_of(request), body))


@routes.post(A + "/x402/settle")
async def settle_permissions(request: web.Request) -> web.Response:
    account = caller(request)
    body = await v.read_json(request)
    return ok(settle(store_of(request), account.address, body))


#: The MPP routes the SDKs call (payments_py ``api/nvm_api.py``); this sandbox has no MPP.
MPP_ROUTES = ("permissions", "challenge", "verify", "settle")


async def mpp_not_configured(request: web.Request) -> web.Response:
    """A deployment without MPP answers every MPP route with ``BCK.MPP.0002`` (status 501,
    as the TS SDK's own tests stub it); the SDKs raise ``MppNotConfiguredError``."""
    raise ApiError(
        501,
        MPP_NOT_CONFIGURED,
        "MPP is not configured on this environment",
        "This sandbox speaks x402 only: use POST /x402/permissions, /x402/verify, /x402/settle",
    )


for _name in MPP_ROUTES:
    routes.post(f"{A}/mpp/{_name}")(mpp_not_configured)


@routes.get("/")
async def info(request: web.Request) -> web.Response:
    """``GET /`` (public): deployment info with contract addresses (payments_py
    ``ContractsAPI.get_deployment_info``)."""
    return ok(deployment_info())


@routes.get(A + "/meta/versions")
async def versions(request: web.Request) -> web.Response:
    account = caller(request)
    return ok(discovery(resolution_of(request), account.pinned_version))


# -- sandbox-only ----------------------------------------------------------------------------


@routes.post(A + "/sandbox/accounts")
async def create_account(request: web.Request) -> web.Response:
    """Open an account (no auth): the sandbox's stand-in for the dashboard's key page."""
    body = await v.read_json(request, optional=True)
    label = v.text(body, "label", required=False, max_len=200) or ""
    version = v.text(body, "apiVersion", required=False, max_len=32)
    return ok(accounts.create_account(store_of(request), label, version), status=201)


@routes.get(A + "/sandbox/ledger/{planId}/{holderAddress}")
async def audit(request: web.Request) -> web.Response:
    """Granted, burned, expired and balance for one holder: lets tests check conservation."""
    store = store_of(request)
    holder = v.address(request.match_info["holderAddress"], "holderAddress")
    plan = require_plan(store, v.identifier(request.match_info["planId"], "planId"))
    return ok(ledger_view(store, plan, holder))


#: Contract names the SDK's ``Contracts`` model requires (payments_py ``api/contracts_api.py``).
CONTRACT_NAMES = (
    "AccessManager",
    "AgreementsStore",
    "AssetsRegistry",
    "DistributePaymentsCondition",
    "FiatPaymentTemplate",
    "FiatSettlementCondition",
    "FixedPaymentTemplate",
    "LinearPricing",
    "LockPaymentCondition",
    "NFT1155Credits",
    "NFT1155ExpirableCredits",
    "NFT1155ExpirableCreditsV2",
    "NVMConfig",
    "OneTimeCreatorHook",
    "PayAsYouGoTemplate",
    "PaymentsVault",
    "ProtocolStandardFees",
    "TokenUtils",
    "TransferCreditsCondition",
)


def deployment_info() -> dict[str, object]:
    """Stable made-up addresses (derived from each name) on the sandbox test network."""
    contracts = {name: contract_address(f"contract:{name}") for name in CONTRACT_NAMES}
    return {
        "name": "svc-sandbox",
        "apiVersion": CURRENT,
        "deployment": {"version": CURRENT, "chainId": 84532, "contracts": contracts},
    }
