"""Price and credits configs, and exact conversion of ``$x.yy`` to minor units.

Fiat amounts are 6-decimal units, not cents (WIRE.md §2.4, §9 row 3): $1.50 is ``1500000``.
Everything goes through :class:`decimal.Decimal`; a float never touches a price.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from .encoding import ZERO_ADDRESS, is_address
from .models import CreditsConfig, PriceConfig

USDC_DECIMALS = 6
NATIVE_DECIMALS = 18
FIAT_DECIMALS = 6
FIAT_MINIMUM = 1_000_000  # $1.00


class PriceError(ValueError):
    """A price or amount the user gave cannot be used; the message says how to write it."""


def to_minor_units(text: str | int, decimals: int) -> int:
    """``"$1.50"`` → 1500000 with 6 decimals; a bare integer is already in minor units."""
    if isinstance(text, bool):
        raise PriceError("a price must be a number, not true/false")
    if isinstance(text, int):
        value = text
    else:
        raw = text.strip()
        if raw.startswith("$"):
            try:
                amount = Decimal(raw[1:].strip())
            except InvalidOperation:
                raise PriceError(f"'{text}' is not a price; write $1.50 or 1500000") from None
            if not amount.is_finite():
                raise PriceError(f"'{text}' is not a price; write $1.50 or 1500000")
            scaled = amount.scaleb(decimals)
            if scaled != scaled.to_integral_value():
                raise PriceError(
                    f"'{text}' has more than {decimals} decimal places for this currency"
                )
            value = int(scaled)
        elif raw.isdigit():
            value = int(raw)
        else:
            raise PriceError(
                f"'{text}' is not a price; use minor units (1500000) or dollars ($1.50)"
            )
    if value < 0:
        raise PriceError("a price cannot be negative")
    return value


def parse_amounts(value: str | int | list[str | int], decimals: int) -> list[int]:
    """Accept a list, a single value, or a comma-separated string of prices."""
    if isinstance(value, list):
        items: list[str | int] = list(value)
    elif isinstance(value, str):
        # commas separate prices, so "$1,000.00" is two (invalid) prices, never $1000
        items = [part for part in value.split(",") if part.strip()]
    else:
        items = [value]
    if not items:
        raise PriceError("give at least one price")
    return [to_minor_units(item, decimals) for item in items]


def _receivers(receivers: list[str], count: int) -> list[str]:
    if len(receivers) == 1 and count > 1:
        receivers = receivers * count
    if len(receivers) != count:
        raise PriceError(
            f"give one receiver per price ({count} prices, {len(receivers)} receivers)"
        )
    for receiver in receivers:
        if not is_address(receiver):
            raise PriceError(f"receiver '{receiver}' is not a wallet address (0x + 40 hex digits)")
    return receivers


def free_price() -> PriceConfig:
    return PriceConfig(is_crypto=True, amounts=[], receivers=[])


def fiat_price(amounts: list[int], receivers: list[str], currency: str = "usd") -> PriceConfig:
    total = sum(amounts)
    if 0 < total < FIAT_MINIMUM:
        raise PriceError("a card price must be at least $1.00 (1000000 units)")
    return PriceConfig(
        is_crypto=False,
        amounts=amounts,
        receivers=_receivers(receivers, len(amounts)),
        currency=currency,
    )


def crypto_price(
    amounts: list[int], receivers: list[str], token_address: str | None = None
) -> PriceConfig:
    """A crypto price in an ERC20 token, or the native token when ``token_address`` is None."""
    if token_address is not None and not is_address(token_address):
        raise PriceError("tokenAddress must be a contract address (0x + 40 hex digits)")
    return PriceConfig(
        is_crypto=True,
        amounts=amounts,
        receivers=_receivers(receivers, len(amounts)),
        token_address=token_address or ZERO_ADDRESS,
    )


def native_price(amounts: list[int], receivers: list[str]) -> PriceConfig:
    return crypto_price(amounts, receivers, None)


def erc20_price(amounts: list[int], receivers: list[str], token_address: str) -> PriceConfig:
    return crypto_price(amounts, receivers, token_address)


def fixed_credits(granted: int, per_request: int = 1) -> CreditsConfig:
    if granted < 1 or per_request < 1:
        raise PriceError("credits granted and credits per request must be at least 1")
    return CreditsConfig(
        is_redemption_amount_fixed=True,
        amount=granted,
        min_amount=per_request,
        max_amount=per_request,
    )


def dynamic_credits(granted: int, min_per_request: int, max_per_request: int) -> CreditsConfig:
    if granted < 1 or not 1 <= min_per_request <= max_per_request:
        raise PriceError("need credits ≥ 1 and 1 ≤ min per request ≤ max per request")
    return CreditsConfig(
        is_redemption_amount_fixed=False,
        amount=granted,
        min_amount=min_per_request,
        max_amount=max_per_request,
    )


def expirable_credits(duration_secs: int) -> CreditsConfig:
    """The time-limited shape: access for ``duration_secs`` (WIRE.md §2.4, §9 row 14)."""
    if duration_secs <= 0:
        raise PriceError("a time plan needs durationSecs greater than 0")
    return CreditsConfig(
        is_redemption_amount_fixed=False,
        duration_secs=duration_secs,
        amount=1,
        min_amount=1,
        max_amount=1,
    )


def decimals_for(token_address: str | None, is_fiat: bool) -> int:
    """Fiat 6, native token 18, ERC20 (USDC-like) 6."""
    if is_fiat:
        return FIAT_DECIMALS
    return NATIVE_DECIMALS if token_address in (None, "", ZERO_ADDRESS) else USDC_DECIMALS
