"""``svc plans``: list, read, register, order and mint plans (SPEC.md's plans rows).

The price and credits helpers that feed ``register-*`` live in :mod:`.helpers` and are added
to the same group.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import click

from ..service.models import CreditsConfig, PlanMetadata, PriceConfig
from .inputs import address_input, bad, check_addresses, json_input, load_model
from .options import POSITIVE, global_options, listing_options
from .output import Column
from .session import Session, pass_session

if TYPE_CHECKING:
    from .client import CliClient

PLAN_COLUMNS: list[Column] = [
    ("ID", "id"),
    ("NAME", "metadata.main.name"),
    ("PRICE", "metadata.main.price"),
    ("CREDITS", "registry.credits.amount"),
    ("KIND", "metadata.plan.accessLimit"),
]
AGENT_COLUMNS: list[Column] = [
    ("ID", "id"),
    ("NAME", "metadata.main.name"),
    ("ENDPOINTS", "endpoints"),
]


@click.group()
@global_options
def plans() -> None:
    """Payment plans: list, read, register, order, mint; price and credits helpers."""


@plans.command("get-plans")
@listing_options("Plans")
@global_options
@pass_session
def get_plans(
    session: Session, page: int, offset: int, sort_by: str | None, sort_order: str
) -> None:
    """List your own plans, one page at a time."""
    _, answer = session.call(lambda c: c.list_plans(page, offset, sort_by, sort_order))
    session.output().result(answer, items="plans", columns=PLAN_COLUMNS)


@plans.command("get-plan")
@click.argument("plan_id")
@global_options
@pass_session
def get_plan(session: Session, plan_id: str) -> None:
    """Show one plan (public: no key needed)."""
    _, answer = session.call(lambda c: c.get_plan(plan_id), auth=False)
    session.output().result(answer)


@plans.command("get-plan-balance")
@click.argument("plan_id")
@click.option(
    "--account-address",
    metavar="ADDRESS",
    callback=address_input,
    help="Whose balance (default: the profile's account).",
)
@global_options
@pass_session
def get_plan_balance(session: Session, plan_id: str, account_address: str | None) -> None:
    """Credits an account holds on a plan."""
    _, answer = session.call(lambda c: c.get_plan_balance(plan_id, account_address), auth=False)
    session.output().result(answer)


@plans.command("get-agents-associated-to-a-plan")
@click.argument("plan_id")
@click.option(
    "--pagination",
    metavar="JSON",
    callback=json_input,
    help='Page as JSON: {"page": 1, "offset": 10} (text, file or -).',
)
@global_options
@pass_session
def get_agents_of_plan(session: Session, plan_id: str, pagination: dict[str, Any] | None) -> None:
    """List the agents that sell a plan (public)."""
    page, size = _pagination(pagination or {})
    _, answer = session.call(lambda c: c.get_plan_agents(plan_id, page, size), auth=False)
    session.output().result(answer, items="agents", columns=AGENT_COLUMNS)


def _pagination(value: dict[str, Any]) -> tuple[int, int]:
    unknown = sorted(set(value) - {"page", "offset"})
    if unknown:
        raise bad("--pagination", f"unknown field(s) {', '.join(unknown)}; use page and offset")
    numbers = []
    for name, default in (("page", 1), ("offset", 10)):
        item = value.get(name, default)
        if isinstance(item, bool) or not isinstance(item, int) or item < 1:
            raise bad("--pagination", f"{name} must be a whole number of at least 1")
        numbers.append(item)
    return numbers[0], numbers[1]


# -- registering plans -------------------------------------------------------------------------

Register = Callable[..., Awaitable[str]]
#: command name → (client method name, docstring, credits shape it needs)
REGISTER_COMMANDS: dict[str, tuple[str, str, str | None]] = {
    "register-plan": ("register_plan", "Register a plan of any kind.", None),
    "register-credits-plan": (
        "register_credits_plan",
        "Register a credits plan (credits config durationSecs 0).",
        "credits",
    ),
    "register-time-plan": (
        "register_time_plan",
        "Register a time plan (credits config durationSecs > 0).",
        "time",
    ),
    "register-credits-trial-plan": (
        "register_credits_trial_plan",
        "Register a credits trial plan (one purchase per user).",
        "credits",
    ),
    "register-time-trial-plan": (
        "register_time_trial_plan",
        "Register a time trial plan (one purchase per user).",
        "time",
    ),
}


def read_plan_inputs(
    metadata: dict[str, Any], price: dict[str, Any], credits: dict[str, Any], shape: str | None
) -> tuple[PlanMetadata, PriceConfig, CreditsConfig]:
    """The three register files as models; each refusal names its flag."""
    plan_metadata = load_model(PlanMetadata, metadata, "--plan-metadata")
    price_config = load_model(PriceConfig, price, "--price-config")
    check_addresses(
        "--price-config",
        {
            "tokenAddress": price_config.token_address,
            "templateAddress": price_config.template_address,
        }
        | {f"receivers[{i}]": r for i, r in enumerate(price_config.receivers)},
    )
    if len(price_config.receivers) != len(price_config.amounts):
        raise bad("--price-config", "give one receiver per amount")
    credits_config = load_model(CreditsConfig, credits, "--credits-config")
    if shape == "credits" and credits_config.duration_secs != 0:
        raise bad(
            "--credits-config", "a credits plan needs durationSecs 0 (use register-time-plan)"
        )
    if shape == "time" and credits_config.duration_secs <= 0:
        raise bad("--credits-config", "a time plan needs durationSecs greater than 0")
    if not 0 <= credits_config.min_amount <= credits_config.max_amount:
        raise bad("--credits-config", "needs 0 <= minAmount <= maxAmount")
    return plan_metadata, price_config, credits_config


def _register_command(name: str, method: str, doc: str, shape: str | None) -> click.Command:
    def run(
        session: Session,
        plan_metadata: dict[str, Any],
        price_config: dict[str, Any],
        credits_config: dict[str, Any],
        nonce: int | None = None,
        access_limit: str | None = None,
    ) -> None:
        models = read_plan_inputs(plan_metadata, price_config, credits_config, shape)
        extra: dict[str, Any] = {}
        if nonce is not None:
            extra["nonce"] = nonce
        if access_limit is not None:
            extra["access_limit"] = access_limit

        def operation(client: CliClient) -> Awaitable[str]:
            register: Register = getattr(client, method)
            return register(*models, **extra)

        _, answer = session.call(operation)
        session.output().result(answer)

    run.__doc__ = doc
    command = global_options(pass_session(run))
    if shape is None:
        command = click.option(
            "--access-limit",
            type=click.Choice(["credits", "time"]),
            help="Plan kind (default: time when durationSecs > 0, else credits).",
        )(command)
        command = click.option(
            "--nonce",
            type=click.IntRange(min=0),
            metavar="N",
            help="Registration nonce (default: random).",
        )(command)
    for flag, what in (
        ("--credits-config", "Credits config JSON (a get-*-credits-config helper's output)."),
        ("--price-config", "Price config JSON (a get-*-price-config helper's output)."),
        ("--plan-metadata", 'Plan metadata JSON, e.g. {"name": "Starter"} (file, text or -).'),
    ):
        command = click.option(flag, metavar="JSON", callback=json_input, required=True, help=what)(
            command
        )
    return click.command(name)(command)


for _name, (_method, _doc, _shape) in REGISTER_COMMANDS.items():
    plans.add_command(_register_command(_name, _method, _doc, _shape))


# -- ordering and minting ----------------------------------------------------------------------


@plans.command("order-plan")
@click.argument("plan_id")
@global_options
@pass_session
def order_plan(session: Session, plan_id: str) -> None:
    """Buy a crypto plan with the profile's account."""
    _, answer = session.call(lambda c: c.order_plan(plan_id))
    session.output().result(answer)


@plans.command("order-fiat-plan")
@click.argument("plan_id")
@global_options
@pass_session
def order_fiat_plan(session: Session, plan_id: str) -> None:
    """Buy a card plan: prints the checkout URL to complete the payment."""
    checkout, answer = session.call(lambda c: c.order_fiat_plan(plan_id))
    session.output().result(answer, text=checkout.checkout_url)


@plans.command("mint-plan-credits")
@click.argument("plan_id")
@click.option(
    "--credits-amount", type=POSITIVE, metavar="N", required=True, help="Credits to grant."
)
@click.option(
    "--credits-receiver",
    metavar="ADDRESS",
    callback=address_input,
    required=True,
    help="Account to grant to.",
)
@global_options
@pass_session
def mint_plan_credits(
    session: Session, plan_id: str, credits_amount: int, credits_receiver: str
) -> None:
    """Grant credits of your plan to an account (plan owner only)."""
    _, answer = session.call(lambda c: c.mint_credits(plan_id, credits_amount, credits_receiver))
    session.output().result(answer)


@plans.command("mint-plan-expirable")
@click.argument("plan_id")
@click.option(
    "--credits-amount", type=POSITIVE, metavar="N", required=True, help="Credits to grant."
)
@click.option(
    "--credits-receiver",
    metavar="ADDRESS",
    callback=address_input,
    required=True,
    help="Account to grant to.",
)
@click.option(
    "--credits-duration",
    type=click.IntRange(min=0),
    metavar="N",
    default=0,
    show_default=True,
    help="Seconds until they expire (0: never).",
)
@global_options
@pass_session
def mint_plan_expirable(
    session: Session,
    plan_id: str,
    credits_amount: int,
    credits_receiver: str,
    credits_duration: int,
) -> None:
    """Grant credits that expire (plan owner only)."""
    _, answer = session.call(
        lambda c: c.mint_expirable(plan_id, credits_amount, credits_receiver, credits_duration)
    )
    session.output().result(answer)
