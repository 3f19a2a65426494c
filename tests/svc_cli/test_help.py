"""Help and docs: every command and flag of SPEC.md's client table exists as spelled there,
the help names them, docs/cli.md is the help's own text, and ``svc`` is a console script."""

from __future__ import annotations

import tomllib
from pathlib import Path

import click
import pytest

from svc_gateway.svc_cli import cli, main
from svc_gateway.svc_cli.docs import render

from .conftest import ROOT, Svc

#: SPEC.md, "Client operations (SDK and command-line client)": command → its flags.
SPEC_TABLE: dict[tuple[str, ...], tuple[str, ...]] = {
    ("plans", "get-plans"): ("--page", "--offset", "--sort-by", "--sort-order"),
    ("plans", "get-plan"): (),
    ("plans", "get-plan-balance"): ("--account-address",),
    ("plans", "get-agents-associated-to-a-plan"): ("--pagination",),
    ("plans", "register-plan"): (
        "--plan-metadata", "--price-config", "--credits-config", "--nonce", "--access-limit",
    ),
    **{
        ("plans", name): ("--plan-metadata", "--price-config", "--credits-config")
        for name in (
            "register-credits-plan", "register-time-plan", "register-credits-trial-plan",
            "register-time-trial-plan",
        )
    },
    ("plans", "order-plan"): (),
    ("plans", "order-fiat-plan"): (),
    ("plans", "mint-plan-credits"): ("--credits-amount", "--credits-receiver"),
    ("plans", "mint-plan-expirable"): (
        "--credits-amount", "--credits-receiver", "--credits-duration",
    ),
    ("plans", "get-free-price-config"): (),
    ("plans", "get-fiat-price-config"): ("--amount", "--receiver"),
    ("plans", "get-crypto-price-config"): ("--amount", "--receiver", "--token-address"),
    ("plans", "get-native-token-price-config"): ("--amount", "--receiver"),
    ("plans", "get-erc20-price-config"): ("--amount", "--receiver", "--token-address"),
    ("plans", "get-eurc-price-config"): ("--amount", "--receiver"),
    ("plans", "get-pay-as-you-go-price-config"): ("--amount", "--receiver"),
    ("plans", "get-fixed-credits-config"): ("--credits-granted", "--credits-per-request"),
    ("plans", "get-dynamic-credits-config"): (
        "--credits-granted", "--min-credits-per-request", "--max-credits-per-request",
    ),
    ("plans", "get-pay-as-you-go-credits-config"): (),
    ("plans", "get-expirable-duration-config"): ("--duration-of-plan",),
    ("plans", "get-non-expirable-duration-config"): (),
    ("plans", "set-onchain-mirror"): ("--credits-config", "--onchain-mirror"),
    ("plans", "set-redemption-type"): ("--credits-config", "--redemption-type"),
    ("x402token", "get-x402-access-token"): (
        "--agent-id", "--redemption-limit", "--order-limit", "--expiration",
    ),
    ("facilitator", "verify-permissions"): ("--params",),
    ("facilitator", "settle-permissions"): ("--params",),
    ("config", "show"): (),
    ("agents", "register-agent"): ("--agent-metadata", "--agent-api", "--payment-plans"),
}  # fmt: skip
GLOBAL = ("--profile", "--format", "--api-version")


def find(path: tuple[str, ...]) -> click.Command:
    command: click.Command = cli
    for name in path:
        assert isinstance(command, click.Group), path
        command = command.commands[name]
    return command


def flags(command: click.Command) -> set[str]:
    return {opt for param in command.params for opt in getattr(param, "opts", [])}


@pytest.mark.parametrize("path", list(SPEC_TABLE), ids=" ".join)
def test_every_command_and_flag_of_the_spec_table_exists(path: tuple[str, ...]) -> None:
    command = find(path)
    assert set(SPEC_TABLE[path]) | set(GLOBAL) <= flags(command)
    for param in command.params:  # one line of help each
        if isinstance(param, click.Option):
            assert param.help and "\n" not in param.help, (path, param.name)


async def test_help_lists_the_groups_and_names_each_flag(svc: Svc) -> None:
    top = await svc.ok("--help")
    for group in ("plans", "agents", "x402token", "facilitator", "delegation", "config", "login"):
        assert f"  {group} " in top.out
    register = await svc.ok("plans", "register-plan", "--help")
    for flag in SPEC_TABLE[("plans", "register-plan")] + GLOBAL:
        assert flag in register.out


def test_the_docs_page_is_the_help_text() -> None:
    page = ROOT / "docs" / "cli.md"
    assert page.read_text() == render(), (
        "docs/cli.md is stale: run PYTHONPATH=plugin python -m svc_gateway.svc_cli.docs > "
        "docs/cli.md"
    )


def test_svc_is_a_console_script_beside_svc_gateway() -> None:
    scripts = tomllib.loads(Path(ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["svc"] == "svc_gateway.svc_cli:main"
    assert scripts["svc-gateway"] == "svc_gateway.cli:main"
    assert main(["--version"]) == 0
