"""The plan helpers of ``svc plans``: price and credits configs to feed ``register-*``.

They print JSON unless ``--format table`` is given (their product is a document), built with
the plugin's own pricing helpers, so the output of one is the input of the next, unedited.
Only ``get-pay-as-you-go-price-config`` may ask the service (for the template address).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from ..service import pricing
from ..service.models import CreditsConfig, PriceConfig
from .inputs import address_input, bad, json_input, load_model
from .options import POSITIVE, global_options
from .profiles import ProfileBook, environment_only
from .session import Session, pass_session

#: EURC per environment (payments-py ``EURC_TOKEN_ADDRESS`` and its testnet twin).
EURC_ADDRESSES = {
    "live": "0x60a3E35Cc302bFA44Cb288Bc5a4F316Fdb1adb42",
    "sandbox": "0x808456652fdb597867f38412077A9182bf77359F",
    "local": "0x808456652fdb597867f38412077A9182bf77359F",
}
REDEMPTION_TYPES = {
    "ONLY_GLOBAL_ROLE": 0,
    "ONLY_OWNER": 1,
    "ONLY_PLAN_ROLE": 2,
    "ONLY_SUBSCRIBER": 4,
    **{str(n): n for n in (0, 1, 2, 4)},
}
F = TypeVar("F", bound=Callable[..., Any])
AMOUNT_HELP = "Price in minor units (1000000 = 1 USDC or $1.00), or dollars such as $1.50."


def emit(session: Session, config: PriceConfig | CreditsConfig) -> None:
    session.output(default="json").result(config.wire())


def amount_of(text: str, decimals: int) -> int:
    try:
        return pricing.to_minor_units(text, decimals)
    except pricing.PriceError as error:
        raise bad("--amount", str(error)) from None


#: The helper commands, in help order; the ``plans`` group adds them (see ``main``).
HELPERS: list[click.Command] = []


def helper(name: str) -> Callable[[Callable[..., None]], click.Command]:
    def register(function: Callable[..., None]) -> click.Command:
        command = click.command(name)(function)
        HELPERS.append(command)
        return command

    return register


def price_options(function: F) -> F:
    function = click.option(
        "--receiver", metavar="ADDRESS", callback=address_input, required=True, help="Who is paid."
    )(function)
    return click.option("--amount", required=True, help=AMOUNT_HELP)(function)


def token_option(required: bool, text: str) -> Callable[[F], F]:
    return click.option(
        "--token-address",
        metavar="ADDRESS",
        callback=address_input,
        required=required,
        help=text,
    )


# -- price helpers -----------------------------------------------------------------------------


@helper("get-free-price-config")
@global_options
@pass_session
def get_free_price_config(session: Session) -> None:
    """Price config of a free plan."""
    emit(session, pricing.free_price())


@helper("get-fiat-price-config")
@price_options
@click.option("--currency", default="USD", show_default=True, help="ISO 4217 currency code.")
@global_options
@pass_session
def get_fiat_price_config(session: Session, amount: str, receiver: str, currency: str) -> None:
    """Price config paid by card (at least $1.00 = 1000000)."""
    try:
        config = pricing.fiat_price(
            [amount_of(amount, pricing.FIAT_DECIMALS)], [receiver], currency
        )
    except pricing.PriceError as error:
        raise bad("--amount", str(error)) from None
    emit(session, config)


def _crypto(amount: str, receiver: str, token: str | None) -> PriceConfig:
    decimals = pricing.token_unit(token)[1]
    return pricing.crypto_price([amount_of(amount, decimals)], [receiver], token)


@helper("get-crypto-price-config")
@price_options
@token_option(False, "ERC20 token paid in (default: the native token).")
@global_options
@pass_session
def get_crypto_price_config(
    session: Session, amount: str, receiver: str, token_address: str | None
) -> None:
    """Price config paid in crypto."""
    emit(session, _crypto(amount, receiver, token_address))


@helper("get-native-token-price-config")
@price_options
@global_options
@pass_session
def get_native_token_price_config(session: Session, amount: str, receiver: str) -> None:
    """Price config paid in the network's native token (18 decimals)."""
    emit(session, _crypto(amount, receiver, None))


@helper("get-erc20-price-config")
@price_options
@token_option(True, "ERC20 token paid in.")
@global_options
@pass_session
def get_erc20_price_config(
    session: Session, amount: str, receiver: str, token_address: str
) -> None:
    """Price config paid in an ERC20 token."""
    emit(session, _crypto(amount, receiver, token_address))


@helper("get-eurc-price-config")
@price_options
@token_option(False, "EURC contract (default: the environment's EURC).")
@global_options
@pass_session
def get_eurc_price_config(
    session: Session, amount: str, receiver: str, token_address: str | None
) -> None:
    """Price config paid in EURC (6 decimals: 29000000 = 29 EURC)."""
    if token_address is None:
        environment = environment_only(ProfileBook(), session.settings.profile)
        token_address = EURC_ADDRESSES[environment]
    config = _crypto(amount, receiver, token_address).model_copy(update={"currency": "EURC"})
    emit(session, config)


@helper("get-pay-as-you-go-price-config")
@price_options
@token_option(False, "ERC20 token paid in (default: the native token).")
@click.option(
    "--template-address",
    metavar="ADDRESS",
    callback=address_input,
    help="PayAsYouGoTemplate contract (default: read from the service).",
)
@global_options
@pass_session
def get_pay_as_you_go_price_config(
    session: Session,
    amount: str,
    receiver: str,
    token_address: str | None,
    template_address: str | None,
) -> None:
    """Price config charged per request at settle, not at order."""
    config = _crypto(amount, receiver, token_address)
    if template_address is None:
        info, _ = session.call(lambda c: c.deployment_info(), auth=False)
        contracts = (info.get("deployment") or {}).get("contracts") or {}
        template_address = contracts.get("PayAsYouGoTemplate")
        if not isinstance(template_address, str):
            raise click.ClickException("The service's deployment info names no PayAsYouGoTemplate")
    emit(session, config.model_copy(update={"template_address": template_address}))


# -- credits helpers ---------------------------------------------------------------------------


@helper("get-fixed-credits-config")
@click.option(
    "--credits-granted", type=POSITIVE, metavar="N", required=True, help="Credits per purchase."
)
@click.option(
    "--credits-per-request",
    type=POSITIVE,
    metavar="N",
    default=1,
    show_default=True,
    help="Credits per call.",
)
@global_options
@pass_session
def get_fixed_credits_config(
    session: Session, credits_granted: int, credits_per_request: int
) -> None:
    """Credits config burning the same credits on every request."""
    emit(session, pricing.fixed_credits(credits_granted, credits_per_request))


@helper("get-dynamic-credits-config")
@click.option(
    "--credits-granted", type=POSITIVE, metavar="N", required=True, help="Credits per purchase."
)
@click.option(
    "--min-credits-per-request",
    type=POSITIVE,
    metavar="N",
    default=1,
    show_default=True,
    help="Fewest.",
)
@click.option(
    "--max-credits-per-request",
    type=POSITIVE,
    metavar="N",
    default=1,
    show_default=True,
    help="Most.",
)
@global_options
@pass_session
def get_dynamic_credits_config(
    session: Session,
    credits_granted: int,
    min_credits_per_request: int,
    max_credits_per_request: int,
) -> None:
    """Credits config where each request burns between a min and a max."""
    if min_credits_per_request > max_credits_per_request:
        raise bad("--min-credits-per-request", "must not exceed --max-credits-per-request")
    config = pricing.dynamic_credits(
        credits_granted, min_credits_per_request, max_credits_per_request
    )
    emit(session, config)


def _one_credit(duration_secs: int = 0) -> CreditsConfig:
    """The SDK's shape for plans whose credits are not what is sold (time, pay as you go)."""
    return CreditsConfig(
        is_redemption_amount_fixed=False,
        duration_secs=duration_secs,
        amount=1,
        min_amount=1,
        max_amount=1,
    )


@helper("get-pay-as-you-go-credits-config")
@global_options
@pass_session
def get_pay_as_you_go_credits_config(session: Session) -> None:
    """Credits config of a pay-as-you-go plan (nothing minted up front)."""
    emit(session, _one_credit())


@helper("get-expirable-duration-config")
@click.option(
    "--duration-of-plan", type=POSITIVE, metavar="N", required=True, help="Seconds of access."
)
@global_options
@pass_session
def get_expirable_duration_config(session: Session, duration_of_plan: int) -> None:
    """Credits config of a time plan (access for a duration)."""
    emit(session, pricing.expirable_credits(duration_of_plan))


@helper("get-non-expirable-duration-config")
@global_options
@pass_session
def get_non_expirable_duration_config(session: Session) -> None:
    """Credits config of a time plan that never expires (register with --access-limit time)."""
    emit(session, _one_credit())


@helper("set-onchain-mirror")
@click.option(
    "--credits-config",
    metavar="JSON",
    callback=json_input,
    required=True,
    help="Credits config JSON.",
)
@click.option(
    "--onchain-mirror",
    type=click.BOOL,
    default=True,
    show_default=True,
    help="Mirror burns on chain (true/false).",
)
@global_options
@pass_session
def set_onchain_mirror(
    session: Session, credits_config: dict[str, Any], onchain_mirror: bool
) -> None:
    """Print a credits config with onchainMirror changed."""
    config = load_model(CreditsConfig, credits_config, "--credits-config")
    emit(session, config.model_copy(update={"onchain_mirror": onchain_mirror}))


@helper("set-redemption-type")
@click.option(
    "--credits-config",
    metavar="JSON",
    callback=json_input,
    required=True,
    help="Credits config JSON.",
)
@click.option(
    "--redemption-type",
    type=click.Choice(list(REDEMPTION_TYPES), case_sensitive=False),
    required=True,
    help="Who may redeem: 4 ONLY_SUBSCRIBER, 1 ONLY_OWNER, 2 ONLY_PLAN_ROLE, 0 ONLY_GLOBAL_ROLE.",
)
@global_options
@pass_session
def set_redemption_type(
    session: Session, credits_config: dict[str, Any], redemption_type: str
) -> None:
    """Print a credits config with redemptionType changed."""
    config = load_model(CreditsConfig, credits_config, "--credits-config")
    value = REDEMPTION_TYPES[redemption_type.upper()]
    emit(session, config.model_copy(update={"redemption_type": value}))
