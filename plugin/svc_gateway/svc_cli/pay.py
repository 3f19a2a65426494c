"""``svc pay <url>``: pay a URL's 402 in one command, checked as svc_queryAgent checks it.

The URL is asked once without payment; its 402 names the plan and the agent. Then buying/'s
own checks run (the URL's scheme and address, the service's record of the agent: the URL must
be one of its registered ``POST`` endpoints, the plan it sells), the price is shown and
approved (a prompt, ``--yes``, or ``--max-price``), the plan is ordered when the balance is
short, a single-use token bound to the URL is minted, and the request is sent with it: the
answer and the checked receipt are printed. ``--print-header`` prints the
``payment-signature`` header for curl instead of sending.

Retries: a timeout or a dropped connection is retried with the same token and the same
``Idempotency-Key`` (a seller that already answered replays its answer, uncharged), at most
:data:`ATTEMPTS` times in all, within the one ``--timeout`` deadline.

``svc`` is the person's own command line: it orders and mints directly, and the confirmation
is the person's approval (``tests/test_layout.py`` exempts it from the spending gate).
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import unicodedata
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from .errors import BadUsage, Refused
from .inputs import json_input
from .options import global_options
from .output import Output
from .pay_price import Cap, approve, price_of, read_cap
from .session import Session, pass_session

if TYPE_CHECKING:
    import httpx

    from ..account.core import PluginCore
    from ..buying.answers import AgentReply

#: the most times the paid request is sent (the first try and its retries), same token and key
ATTEMPTS = 3
DEFAULT_TIMEOUT_SECS = 60.0
#: character categories never printed from an agent's answer: controls, format, surrogates
_HIDDEN = frozenset({"Cc", "Cf", "Cs", "Co"})
#: pages of 100 agents read to find the one that registered the URL (a 402 naming no agent)
AGENT_PAGES = 5
#: a token's delegation lives this long (it is single-use and bound to the URL)
TOKEN_DURATION_SECS = 3600
#: buying/'s refusals of the URL itself, before any traffic: bad usage (exit 2)
LOCAL_REFUSALS = frozenset({"insecure_agent_url", "invalid_params"})


@dataclass(frozen=True)
class PayQuery:
    """What ``svc pay`` buys, in the shape buying/'s checks read (:class:`AgentQuery`)."""

    agent_url: str
    plan_id: str | None
    agent_id: str | None
    prompt: str = "-"
    tool_name: str | None = None
    arguments: dict[str, Any] | None = None
    list_tools: bool = False
    payment_type: str | None = None
    payment_method_id: str | None = None
    assistant_id: str | None = None


def _failure(code: str, message: str, hint: str) -> Refused:
    return Refused(f"{message}. {hint}", code=code)


def _accepts(reply: AgentReply) -> list[dict[str, Any]]:
    from ..encoding import decode_b64_json

    envelope = decode_b64_json(reply.headers.get("payment-required")) or {}
    raw = envelope.get("accepts")
    return [a for a in raw if isinstance(a, dict)] if isinstance(raw, list) else []


def _pick(
    accepts: list[dict[str, Any]], plan: str | None, agent: str | None
) -> tuple[str | None, str | None]:
    """The plan and agent the 402 names (the flags win; a flag's plan must be accepted)."""
    plans = [str(a["planId"]) for a in accepts if isinstance(a.get("planId"), str | int)]
    if plan is not None and plans and plan not in plans:
        raise _failure(
            "plan_not_accepted",
            f"The URL's 402 does not accept plan {plan}; nothing was paid",
            f"It accepts: {', '.join(plans[:10])}. Pass one of them with --plan.",
        )
    if plan is None and len(set(plans)) > 1:
        raise _failure(
            "missing_plan_id",
            f"The URL accepts {len(set(plans))} plans; say which one to pay with",
            f"Pass --plan with one of: {', '.join(dict.fromkeys(plans))}.",
        )
    chosen = plan or (plans[0] if plans else None)
    named = next(
        (
            a["extra"].get("agentId")
            for a in accepts
            if isinstance(a.get("extra"), dict) and str(a.get("planId")) == chosen
        ),
        None,
    )
    return chosen, agent or (named if isinstance(named, str) and named else None)


async def send_with_retries(
    http: httpx.AsyncClient, url: str, body: Any, headers: dict[str, str], output: Output
) -> AgentReply:
    """The paid POST through the buyer's one retry rule (:func:`..buying.retrying.with_retries`,
    as svc_queryAgent's): a dropped connection is sent again with the same headers (the same
    token and ``Idempotency-Key``), and a 409 (the seller still runs the first) after its
    ``Retry-After``, at most :data:`ATTEMPTS` times in all. The caller's deadline bounds them."""
    import httpx

    from ..buying.retrying import retry_after, with_retries
    from ..buying.send import send_paid

    def lost(exc: BaseException) -> bool:
        if not isinstance(exc, httpx.TransportError):
            return False
        output.note(
            f"No answer ({type(exc).__name__}); sending again with the same token and "
            "Idempotency-Key."
        )
        return True

    retried = await with_retries(
        lambda: send_paid(http, url, body, headers),
        lost=lost,
        busy=lambda reply: retry_after(reply.status, reply.headers),
        attempts=ATTEMPTS,
    )
    return retried.value


async def pay(
    session: Session,
    url: str,
    body: Any,
    plan_flag: str | None,
    agent_flag: str | None,
    yes: bool,
    cap: Cap | None,
    print_header: bool,
    idempotency_key: str,
    timeout: float,  # noqa: ASYNC109 - the command's one deadline, applied below
) -> dict[str, Any]:
    """Every step of the module docstring; the result ``--format json`` prints."""
    import httpx

    from ..account.core import PluginCore
    from ..account.core import Session as CoreSession
    from ..buying.addresses import check_agent_address, check_agent_url
    from ..config import load_config
    from ..runtime import PluginRuntime

    resolved = session.resolved
    client = session.client(auth=True)  # refused (exit 2) without a key, before any traffic
    await client.aclose()
    assert resolved.key is not None
    config = load_config(
        {
            "environment": resolved.environment,
            "baseUrl": resolved.base_url,
            "requestTimeoutSecs": timeout,
            **({"apiVersion": resolved.api_version} if resolved.api_version else {}),
        }
    )
    runtime = PluginRuntime("svc-pay")
    core = PluginCore(config, runtime)
    core.session = CoreSession(resolved.key, resolved.environment, "config")
    output = session.output()
    try:
        check_agent_url(url)
        async with asyncio.timeout(timeout):
            await check_agent_address(core, url)
            limits = httpx.Timeout(timeout / 2, connect=min(10.0, timeout / 2))
            # plain http is only ever loopback (check_agent_url): no TLS context to build
            tls = url.lower().startswith("https:")
            async with httpx.AsyncClient(
                timeout=limits, verify=tls, follow_redirects=False
            ) as http:
                return await _pay(
                    core, http, output, url, body, plan_flag, agent_flag, yes, cap,
                    print_header, idempotency_key,
                )  # fmt: skip
    except TimeoutError:
        raise Refused(
            f"No answer from {url} within {timeout:g} s (--timeout); if the token was sent, "
            "'svc plans get-plan-balance' shows what was charged",
            code="timeout",
        ) from None
    finally:
        await core.aclose()
        runtime.close()


async def _pay(
    core: PluginCore,
    http: httpx.AsyncClient,
    output: Output,
    url: str,
    body: Any,
    plan_flag: str | None,
    agent_flag: str | None,
    yes: bool,
    cap: Cap | None,
    print_header: bool,
    idempotency_key: str,
) -> dict[str, Any]:
    import httpx

    from ..approvals.money import cents_ceiling
    from ..buying.answers import interpret
    from ..buying.purchase import HTTP_VERB, agent_document, agent_plan_ids, decide_purchase
    from ..buying.send import send_paid
    from ..interop.agent_card import fetch_card

    key_header = {"Idempotency-Key": idempotency_key}
    try:
        # the key goes with the paid request only: a seller keeping answers by key must not
        # keep this 402 for it
        first = await send_paid(http, url, body, {})
    except httpx.HTTPError as exc:
        raise Refused(
            f"Could not reach {url} ({type(exc).__name__}); nothing was paid",
            code="agent_unreachable",
        ) from None
    if first.status != 402:
        raise Refused(
            f"{url} answered HTTP {first.status}, not 402 Payment Required: it asks for no "
            "payment here (check the URL and that it is the paid route); nothing was paid",
            code="no_payment_required",
        )
    accepts = _accepts(first)
    if not accepts:
        raise Refused(
            f"{url} answered 402 without a payment-required envelope naming a plan; "
            "nothing was paid",
            code="no_payment_required",
        )
    plan_id, agent_id = _pick(accepts, plan_flag, agent_flag)
    if agent_id is None and plan_id is not None:  # the 402 names no agent: the service's record
        agent_id = await agent_at(core, plan_id, url)
    found = await fetch_card(http, url)
    purchase = await decide_purchase(core, PayQuery(url, plan_id, agent_id), found)
    sold = agent_plan_ids(await agent_document(core, purchase.agent_id))
    if purchase.plan_id not in sold:  # the 402 is the URL's word; the service's record decides
        raise Refused(
            f"Agent {purchase.agent_id} does not sell plan {purchase.plan_id} (the service's "
            f"record lists: {', '.join(sold[:10]) or 'none'}); nothing was paid",
            code="plan_not_sold",
        )
    priced = await price_of(core, purchase.plan_id)
    text = priced.describe(purchase.agent_id, url)
    approve(priced, text, yes, cap)
    client = core.client()
    ordered: dict[str, Any] | None = None
    if priced.order and purchase.payment_type == "crypto":
        bought = await client.order_plan(purchase.plan_id)
        ordered = {"planId": purchase.plan_id, "txHash": bought.tx_hash}
        output.note(f"Bought plan {purchase.plan_id}.")
    # the delegation behind the token pays at most a card plan's price (its top-up), else a cent
    limit = cents_ceiling(priced.cost_micro) if priced.order and not ordered else 1
    token = await client.get_access_token(
        purchase.plan_id,
        agent_id=purchase.agent_id,
        payment_type=purchase.payment_type,
        spending_limit_cents=max(limit, 1),
        duration_secs=TOKEN_DURATION_SECS,
        resource_url=url,
        http_verb=HTTP_VERB,
        max_transactions=1,
    )
    base = {
        "url": url,
        "planId": purchase.plan_id,
        "agentId": purchase.agent_id,
        "ordered": ordered,
        "idempotencyKey": idempotency_key,
    }
    if print_header:
        return {**base, "header": f"payment-signature: {token}"}
    headers = {"payment-signature": token, **key_header}
    try:
        reply = await send_with_retries(http, url, body, headers, output)
    except httpx.HTTPError as exc:
        raise Refused(
            f"The paid request to {url} got no answer after {ATTEMPTS} tries "
            f"({type(exc).__name__}); the token may have been charged: "
            f"'svc plans get-plan-balance {purchase.plan_id}' shows the balance. Running the "
            f"same command with --idempotency-key {idempotency_key} asks again without paying "
            "twice for an answer the seller kept",
            code="agent_unreachable",
        ) from None
    result = interpret(reply, purchase, client.address, url)
    after = await client.get_plan_balance(purchase.plan_id)
    warnings = [*purchase.warnings, *result.pop("warnings", [])]
    return {**base, **result, "balanceAfter": str(after.balance), "warnings": warnings}


async def agent_at(core: PluginCore, plan_id: str, url: str) -> str | None:
    """The one agent selling ``plan_id`` that registered ``url`` as a ``POST`` endpoint, when
    the 402 names none (a seller whose routes name no agent); ``None`` when not exactly one."""
    from ..buying.purchase import is_registered, registered_endpoints

    found: list[str] = []
    client = core.public_client()
    for page in range(1, AGENT_PAGES + 1):
        listed = await client.get_plan_agents(plan_id, page=page, page_size=100)
        for agent in listed.agents:
            if is_registered(url, registered_endpoints({"endpoints": agent.endpoints}), agent.id):
                found.append(agent.id)
        if page * 100 >= listed.total or not listed.agents:
            break
    return found[0] if len(found) == 1 else None


def receipt_text(result: dict[str, Any]) -> str:
    """The answer, then one line of what was paid (and any warnings), for a person."""
    from ..safe_text import plural

    answer = result.get("answer")
    text = answer if isinstance(answer, str) else json.dumps(answer, indent=2, ensure_ascii=False)
    receipt = result.get("receipt") or {}
    redeemed = receipt.get("creditsRedeemed")
    paid = plural(int(redeemed), "credit") if isinstance(redeemed, str) else "an unknown amount"
    line = (
        f"Paid {paid} of plan {result['planId']} to agent {result['agentId']}; "
        f"balance {plural(int(result['balanceAfter']), 'credit')}"
    )
    if receipt.get("transaction"):
        line += f"; transaction {receipt['transaction']}"
    if result.get("ordered"):
        line += " (the plan was bought first)"
    lines = [text, "", line + "."]
    lines += [f"Note: {warning}" for warning in result.get("warnings") or []]
    return for_terminal("\n".join(lines))


def for_terminal(text: str) -> str:
    """An agent's answer as a terminal shows it safely: its lines and tabs kept, control and
    invisible formatting characters (ESC sequences, bidi overrides, zero-width) removed."""
    return "".join(ch for ch in text if ch in "\n\t" or unicodedata.category(ch) not in _HIDDEN)


def cli_words(hint: str) -> str:
    """svc_queryAgent's hints in this command's words (its parameters are flags here)."""
    for said, flag in (("agentId", "--agent-id"), ("planId", "--plan"), ("agentUrl", "the URL")):
        hint = re.sub(rf"\b{said}\b", flag, hint)
    return hint


@click.command("pay")
@click.argument("url")
@click.option(
    "--data",
    metavar="JSON",
    callback=json_input,
    help="JSON body to POST (file, text or -); default {}.",
)
@click.option("--plan", "plan_id", metavar="PLAN_ID", help="Plan to pay with (default: the 402's).")
@click.option("--agent-id", help="Agent that answers at the URL (default: the 402's).")
@click.option("-y", "--yes", is_flag=True, help="Pay without asking (the price is still shown).")
@click.option(
    "--max-price",
    metavar="AMOUNT",
    callback=read_cap,
    help="Pay without asking when it costs at most this, e.g. '$1.00' or '0.5 USDC'; refuse "
    "above it.",
)
@click.option(
    "--print-header",
    is_flag=True,
    help="Print a ready 'payment-signature: <token>' header for curl instead of sending.",
)
@click.option(
    "--idempotency-key",
    metavar="KEY",
    help="Idempotency-Key header of the paid request (default: a random one); a retry sends "
    "the same.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=DEFAULT_TIMEOUT_SECS,
    show_default=True,
    metavar="SECONDS",
    help="One deadline for everything, retries included.",
)
@global_options
@pass_session
def pay_command(
    session: Session,
    url: str,
    data: Any,
    plan_id: str | None,
    agent_id: str | None,
    yes: bool,
    max_price: Cap | None,
    print_header: bool,
    idempotency_key: str | None,
    timeout: float,
) -> None:
    """Pay a URL's 402 and print the answer and the receipt (asks first, showing the price)."""
    from ..chat.failure import ToolFailure

    if idempotency_key is not None and not idempotency_key.strip():
        raise BadUsage("--idempotency-key must not be empty")
    key = (idempotency_key or "").strip() or secrets.token_urlsafe(16)
    body = {} if data is None else data
    output = session.output()
    try:
        result = asyncio.run(
            pay(session, url, body, plan_id, agent_id, yes, max_price, print_header, key, timeout)
        )
    except ToolFailure as failure:
        if failure.code in LOCAL_REFUSALS:  # refused before anything was sent
            raise BadUsage(f"{failure.message}. {failure.hint}") from None
        raise Refused(f"{failure.message}. {cli_words(failure.hint)}", code=failure.code) from None
    if print_header:  # the credential asked for, printed whole (stdout only)
        if output.json:
            output.result(result, verbatim=("header",))
        else:
            click.echo(str(result["header"]))
        return
    if output.json:
        output.result(result)
    else:
        output.result(result, text=receipt_text(result))
