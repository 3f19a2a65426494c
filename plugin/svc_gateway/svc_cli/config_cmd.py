"""``svc config`` (show, init, set, use), ``svc login`` and ``svc logout``: profiles and keys.

A key is taken from the command line, or from stdin with ``-`` (kept out of shell history and
the process list); it is stored in the profile's key store, never in ``config.json``, and
shown only masked.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from ..api_keys import ApiKey
from .errors import BadUsage
from .keys_check import SANDBOX_PROFILES, check_key, sandbox_accounts, sandbox_root
from .options import global_options, settings_of
from .output import Output, echo
from .profiles import (
    ENVIRONMENT_VARIABLE,
    KEY_VARIABLE,
    SETTINGS,
    ProfileBook,
    check_api_version,
    check_base_url,
    check_environment,
    mask,
    parse_key,
    profile_name,
    resolve,
    stored_where,
)

KEY_NAMES = ("api-key", "apiKey", "svcApiKey")
SET_KEYS = (*SETTINGS, "baseUrl", "apiVersion", *KEY_NAMES)
#: ``describe``'s key, already masked (``local:eyJhbG…x9Qk``): printed as it is
MASKED = ("apiKey",)


def read_key(value: str | None, where: str) -> ApiKey:
    """The key from ``value``, ``-`` (one line of stdin) or a hidden prompt."""
    if value is None and sys.stdin.isatty():
        value = click.prompt("API key (<environment>:<key>)", hide_input=True, err=True)
    elif value is None or value.strip() == "-":
        value = sys.stdin.readline()
    else:
        echo(
            "Note: a key typed on the command line may stay in your shell history; "
            "'-' reads it from stdin instead.",
            err=True,
        )
    return parse_key(value.strip(), where)


def _output(ctx: click.Context) -> Output:
    return Output(settings_of(ctx).format or "table")


def describe(book: ProfileBook, name: str) -> dict[str, Any]:
    """What ``config show`` prints: the profile, where its values come from, the key masked."""
    resolved = resolve(book, name, None)
    key = resolved.key
    return {
        "profile": name,
        "active": book.active() == name,
        "environment": resolved.environment,
        "environmentFrom": ENVIRONMENT_VARIABLE
        if os.environ.get(ENVIRONMENT_VARIABLE, "").strip()
        else "profile",
        "baseUrl": resolved.base_url,
        "apiVersion": resolved.api_version,
        "apiKey": mask(key) if key else None,
        "account": key.address if key else None,
        "keyFrom": resolved.key_source,
        "configFile": str(book.path),
        "profiles": book.names(),
    }


@click.group()
@global_options
def config() -> None:
    """Profiles: show, create (init), edit (set) and choose (use) them."""


@config.command("show")
@global_options
@click.pass_context
def show(ctx: click.Context) -> None:
    """Show the profile: environment, base URL, version, the key masked."""
    book = ProfileBook()
    name = profile_name(book, settings_of(ctx).profile)
    _output(ctx).result(describe(book, name), verbatim=MASKED)


@config.command("init")
@click.option("--api-key", metavar="ENV:KEY", help="The API key, or - to read it from stdin.")
@click.option(
    "--environment",
    type=click.Choice(["sandbox", "live", "local"]),
    help="Environment (default: the key's).",
)
@click.option("--base-url", metavar="URL", help="REST root of the environment, ending in /api/v1.")
@click.option(
    "--from-sandbox",
    metavar="URL",
    help="Instead: profiles 'builder' and 'subscriber' with new accounts of the local sandbox "
    "at URL (what 'svc-gateway sandbox' serves, e.g. http://127.0.0.1:8765).",
)
@global_options
@click.pass_context
def init(
    ctx: click.Context,
    api_key: str | None,
    environment: str | None,
    base_url: str | None,
    from_sandbox: str | None,
) -> None:
    """Create (or replace) a profile and make it the active one."""
    book = ProfileBook()
    if from_sandbox is not None:
        given = [
            flag
            for flag, value in (
                ("--api-key", api_key),
                ("--environment", environment),
                ("--base-url", base_url),
            )
            if value is not None
        ]
        if given:
            raise BadUsage(f"--from-sandbox sets everything itself: leave out {', '.join(given)}")
        init_from_sandbox(ctx, book, from_sandbox)
        return
    name = profile_name(book, settings_of(ctx).profile)
    key = read_key(api_key, "--api-key") if api_key is not None else None
    env = environment or (key.environment if key else None) or "sandbox"
    if key is not None and key.environment not in (None, env):
        raise BadUsage(
            f"--api-key is a key for the {key.environment} environment but --environment is "
            f"{env}: a key is only ever sent to its own environment"
        )
    url = check_base_url(base_url, "--base-url") if base_url else None
    if env == "local" and url is None and not os.environ.get("SVC_LOCAL_BASE_URL"):
        raise BadUsage("--base-url is required for environment local (the sandbox's URL)")
    if key is not None:  # as login: a key the service refuses is not stored (exit 1)
        checked = check_key(key, env, url or login_url({}, env))
        if not checked.ok:
            echo(f"Note: the key was NOT checked with the service: {checked.why}.", err=True)
    book.update(name, activate=True, environment=env, baseUrl=url, apiVersion=None)
    store = book.store(name, for_writing=True)
    store.delete_all()
    if key is not None:
        where = stored_where(store, store.save(env, key.secret))
        echo(f"Stored the key of profile '{name}' in {where}.", err=True)
    _output(ctx).result(describe(book, name), verbatim=MASKED)


def init_from_sandbox(ctx: click.Context, book: ProfileBook, url: str) -> None:
    """Profiles ``builder`` and ``subscriber`` on the sandbox at ``url``, one new account each
    (the first made the active profile when none is)."""
    root = sandbox_root(url)
    accounts = sandbox_accounts(root)
    rows = []
    for name, account in accounts.items():
        key = parse_key(account["apiKey"], "the sandbox's answer")
        book.update(name, activate=False, environment="local", baseUrl=root, apiVersion=None)
        store = book.store(name, for_writing=True)
        store.delete_all()
        where = stored_where(store, store.save("local", key.secret))
        rows.append({"profile": name, "account": key.address, "baseUrl": root, "keyIn": where})
    if not book.active():
        book.update(SANDBOX_PROFILES[0], activate=True)
    output = _output(ctx)
    if output.json:
        output.result({"profiles": rows})
        return
    lines = [
        f"Profile '{row['profile']}': account {row['account']} on {root} (key in {row['keyIn']})."
        for row in rows
    ]
    lines.append("Use them with --profile builder or --profile subscriber.")
    output.result(None, text="\n".join(lines))


@config.command("set")
@click.argument("setting", type=click.Choice(SET_KEYS), metavar="SETTING")
@click.argument("value")
@global_options
@click.pass_context
def set_(ctx: click.Context, setting: str, value: str) -> None:
    """Change one setting: environment, base-url, api-version or api-key (- reads stdin).

    An empty value removes base-url or api-version.
    """
    book = ProfileBook()
    name = profile_name(book, settings_of(ctx).profile)
    current = book.settings(name)
    field = {"baseUrl": "baseUrl", "apiVersion": "apiVersion"}.get(setting) or SETTINGS.get(setting)
    if setting in KEY_NAMES:
        key = read_key(value, "api-key")
        env = current.get("environment") or key.environment or "sandbox"
        if key.environment not in (None, env):
            raise BadUsage(
                f"api-key is a key for the {key.environment} environment but profile '{name}' "
                f"is for {env}: run 'svc config set environment {key.environment}' first"
            )
        store = book.store(name, for_writing=True)
        where = stored_where(store, store.save(env, key.secret))
        book.update(name, environment=env)
        echo(f"Stored the key of profile '{name}' in {where}.", err=True)
    elif field == "environment":
        env = check_environment(value, "environment")
        if current.get("baseUrl") and current.get("environment") not in (None, env):
            echo(
                f"Note: the base URL of profile '{name}' was for {current['environment']}; it "
                "was removed. Set the new one with 'svc config set base-url <URL>'.",
                err=True,
            )
            book.update(name, environment=env, baseUrl=None)
        else:
            book.update(name, environment=env)
    elif field == "baseUrl":
        book.update(name, baseUrl=check_base_url(value, "base-url") if value.strip() else None)
    else:
        version = check_api_version(value, "api-version") if value.strip() else None
        book.update(name, apiVersion=version)
    _output(ctx).result(describe(book, name), verbatim=MASKED)


@config.command("use")
@click.argument("name")
@global_options
@click.pass_context
def use(ctx: click.Context, name: str) -> None:
    """Make another existing profile the active one."""
    book = ProfileBook()
    if name not in book.names():
        known = ", ".join(book.names()) or "none yet"
        raise BadUsage(f"No profile '{name}' (profiles: {known}); create it with 'config init'")
    book.update(name, activate=True)
    _output(ctx).result(describe(book, name), verbatim=MASKED)


@click.command("login")
@click.argument("api_key", required=False, metavar="ENV:KEY")
@global_options
@click.pass_context
def login(ctx: click.Context, api_key: str | None) -> None:
    """Store an API key in the profile (ENV:KEY, or - to read it from stdin)."""
    book = ProfileBook()
    name = profile_name(book, settings_of(ctx).profile)
    key = read_key(api_key, "ENV:KEY")
    current = book.settings(name)
    env = current.get("environment") or key.environment or "sandbox"
    if key.environment not in (None, env):
        raise BadUsage(
            f"This is a {key.environment} key but profile '{name}' is for {env}: log in with "
            f"another --profile, or run 'svc config set environment {key.environment}' first"
        )
    checked = check_key(key, env, login_url(current, env))  # a refused key: exit 1, not stored
    store = book.store(name, for_writing=True)
    where = stored_where(store, store.save(env, key.secret))
    book.update(name, activate=not book.active(), environment=env)
    output = _output(ctx)
    if output.json:
        output.result({**describe(book, name), "keyChecked": checked.ok}, verbatim=MASKED)
    elif checked.ok:
        output.result(
            None,
            text=f"Logged in to {env} as {key.address} (profile '{name}'; key in {where}).",
        )
    else:
        output.result(
            None,
            text=f"Stored the key of {key.address} for {env} (profile '{name}'; key in "
            f"{where}), but could NOT check it with the service: {checked.why}. A later "
            "command will say if the service refuses it.",
        )
    if os.environ.get(KEY_VARIABLE):
        echo(f"Note: {KEY_VARIABLE} is set and overrides the stored key.", err=True)


def login_url(settings: dict[str, Any], env: str) -> str | None:
    """The URL a login checks its key with: the profile's (for ``env``), else the variable's."""
    own = settings.get("baseUrl")
    if isinstance(own, str) and settings.get("environment", env) == env:
        return own
    from_variable = os.environ.get(f"SVC_{env.upper()}_BASE_URL", "").strip()
    return check_base_url(from_variable, f"SVC_{env.upper()}_BASE_URL") if from_variable else None


@click.command("logout")
@global_options
@click.pass_context
def logout(ctx: click.Context) -> None:
    """Remove the profile's stored keys (keyring and file); its settings stay."""
    book = ProfileBook()
    name = profile_name(book, settings_of(ctx).profile)
    book.store(name).delete_all()
    output = _output(ctx)
    if output.json:
        output.result({"profile": name, "loggedOut": True})
    else:
        output.result(None, text=f"Logged out of profile '{name}': its keys were removed.")
