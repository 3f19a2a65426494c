"""Price and credits configs, and exact conversion of ``$x.yy`` to minor units.

Fiat amounts are 6-decimal units, not cents (WIRE.md §2.4, §9 row 3): $1.50 is ``1500000``.
Everything goes through :class:`decimal.Decimal`; a float never touches a price.
"""

from __future__ import annotations

import re
from decimal import Decimal

from ..encoding import ZERO_ADDRESS, is_address
from .models import CreditsConfig, PriceConfig

USDC_DECIMALS = 6
NATIVE_DECIMALS = 18
FIAT_DECIMALS = 6
FIAT_MINIMUM = 1_000_000  # $1.00
MAX_PRICE_DIGITS = 78  # uint256


#: USDC contract per environment: what a ``$`` price on crypto needs as ``tokenAddress``.
USDC_ADDRESSES: dict[str, str] = {
    "sandbox": "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
    "local": "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
    "live": "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
}
#: Tokens whose symbol and decimals the plugin knows (test and main network USDC and EURC).
KNOWN_TOKENS: dict[str, tuple[str, int]] = {
    "0x036cbd53842c5426634e7929541ec2318f3dcf7e": ("USDC", 6),
    "0x833589fcd6edb6e08f4c7c32d4f71b54bda02913": ("USDC", 6),
    "0x808456652fdb597867f38412077a9182bf77359f": ("EURC", 6),
    "0x60a3e35cc302bfa44cb288bc5a4f316fdb1adb42": ("EURC", 6),
}
NATIVE_SYMBOL = "ETH"
_FIAT_SYMBOLS = {"usd": "$", "eur": "€"}

PRICE_FORMAT = (
    "write dollars as $1.50 or $1,000.00, or whole minor units as 1500000 (no sign, no "
    "decimal point); give several prices as a list or separated by commas"
)
#: one price inside a comma-separated string: ``$1,000.00`` keeps its thousands separators
_PRICE_ITEM = re.compile(r"\s*(\$\s*\d{1,3}(?:,\d{3})+(?:\.\d+)?|[^,]*)\s*(?:,|$)")
_DOLLARS = re.compile(r"\$\s*(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?|\$\s*(\.\d+)")


class PriceError(ValueError):
    """A price or amount the user gave cannot be used; the message says how to write it."""


def _not_a_price(text: str) -> PriceError:
    shown = text if len(text) <= 40 else text[:40] + "..."
    return PriceError(f"'{shown}' is not a price: {PRICE_FORMAT}")


def is_dollar_amount(value: object) -> bool:
    """``"$1.50"``: a price written in dollars rather than minor units."""
    return isinstance(value, str) and value.strip().startswith("$")


def to_minor_units(text: str | int, decimals: int) -> int:
    """``"$1.50"`` → 1500000 with 6 decimals; a bare integer is already in minor units."""
    if isinstance(text, bool) or not isinstance(text, str | int):
        raise PriceError(f"a price must be a number or a text such as $1.50: {PRICE_FORMAT}")
    if isinstance(text, int):
        value = text
    else:
        raw = text.strip()
        if len(raw) > MAX_PRICE_DIGITS + 8:
            raise PriceError("a price is at most 78 digits long (a 256-bit integer)")
        dollars = _DOLLARS.fullmatch(raw)
        if dollars:
            whole, fraction, bare_fraction = dollars.groups()
            digits = (whole or "0").replace(",", "") + (fraction or bare_fraction or "")
            scaled = Decimal(digits).scaleb(decimals)
            if scaled != scaled.to_integral_value():
                raise PriceError(
                    f"'{raw}' has more than {decimals} decimal places for this currency"
                )
            value = int(scaled)
        elif raw.isascii() and raw.isdigit():
            value = int(raw)
        elif raw.startswith("-"):
            raise PriceError("a price cannot be negative")
        else:
            raise _not_a_price(raw)
    if value < 0:
        raise PriceError("a price cannot be negative")
    if value >= 2**256:
        raise PriceError("a price is at most 78 digits long (a 256-bit integer)")
    return value


def split_amounts(value: str) -> list[str]:
    """Split ``"$1,000.00, 2000000"`` into prices: a comma inside ``$1,000`` is a separator of
    thousands, any other comma separates two prices."""
    items: list[str] = []
    position = 0
    while position < len(value):
        match = _PRICE_ITEM.match(value, position)
        assert match is not None  # the second alternative matches anything up to a comma
        if match.group(1).strip():
            items.append(match.group(1).strip())
        if match.end() == position:  # pragma: no cover - the pattern always consumes
            break
        position = match.end()
    return items


def parse_amounts(value: object, decimals: int) -> list[int]:
    """Accept a list, a single value, or a comma-separated string of prices."""
    if isinstance(value, list):
        items: list[object] = list(value)
    elif isinstance(value, str):
        items = list(split_amounts(value))
        dollars = [is_dollar_amount(item) for item in items]
        if any(dollars) and not all(dollars):
            raise PriceError(
                f"'{value[:40]}' mixes dollars and minor units in one text, which is ambiguous "
                '($1,0000 could be one price or two): pass a list such as ["$1", "$2"]'
            )
    else:
        items = [value]
    if not items:
        raise PriceError(f"give at least one price: {PRICE_FORMAT}")
    return [to_minor_units(item, decimals) for item in items]  # type: ignore[arg-type]


def token_unit(token_address: str | None) -> tuple[str, int]:
    """Symbol and decimals of a crypto price's token; an unknown ERC20 is assumed 6 decimals."""
    if token_address in (None, "", ZERO_ADDRESS):
        return NATIVE_SYMBOL, NATIVE_DECIMALS
    assert token_address is not None
    known = KNOWN_TOKENS.get(token_address.lower())
    if known:
        return known
    return f"units of token {token_address}", USDC_DECIMALS


def format_amount(amount: int, decimals: int) -> str:
    """``1500000`` with 6 decimals → ``"1.5"``; exact (no float), thousands separated."""
    value = Decimal(amount).scaleb(-decimals)
    text = f"{value:,f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def format_price(
    amounts: list[int], *, is_crypto: bool, token_address: str | None, currency: str | None
) -> str:
    """What a plan costs, with its unit: ``$2.00``, ``1.5 USDC``, ``0.001 ETH``, ``free``."""
    total = sum(amounts)
    if total == 0:
        return "free"
    if not is_crypto:
        code = (currency or "usd").lower()
        symbol = _FIAT_SYMBOLS.get(code)
        dollars = Decimal(total).scaleb(-FIAT_DECIMALS)
        exact_cents = dollars == dollars.quantize(Decimal("0.01"))
        number = f"{dollars:,.2f}" if exact_cents else format_amount(total, FIAT_DECIMALS)
        return f"{symbol}{number}" if symbol else f"{number} {code.upper()}"
    symbol, decimals = token_unit(token_address)
    text = f"{format_amount(total, decimals)} {symbol}"
    if symbol == NATIVE_SYMBOL:
        text += " (native token, 18 decimals)"
    return text


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
