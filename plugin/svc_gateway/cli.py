"""svc-gateway: the console script (sandbox, chat, demo)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import __version__

if TYPE_CHECKING:
    from .account.core import PluginCore

DESCRIPTION = """\
The svc chat-gateway plugin's command line:
  sandbox  serve the local sandbox of the payments service
  chat     the reference chat gateway (an embedded sandbox when no key or service is set)
  demo     sell and buy an agent answer end to end, offline
  astrbot-install  place the svc plugin into an AstrBot data directory"""

#: The chat reads an API key from here when the config has none (never typed, never stored).
KEY_VARIABLE = "SVC_API_KEY"
JSON_EXAMPLE = '{"environment": "local", "baseUrl": "http://127.0.0.1:8765/api/v1"}'


def _read_config(path: str | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise SystemExit(f"svc-gateway: cannot read config {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise SystemExit(
            f"svc-gateway: {path} is not JSON: {exc.msg} (line {exc.lineno}). chat --config "
            f"takes a JSON object of the plugin settings, e.g. {JSON_EXAMPLE} (YAML such as "
            "Hermes's config.yaml is not read here)"
        ) from None
    if not isinstance(data, dict):
        raise SystemExit(f"svc-gateway: {path} must hold a JSON object")
    # accept either the bare plugin section or a host-style file with plugins.entries.svc
    entries = (
        data.get("plugins", {}).get("entries", {}) if isinstance(data.get("plugins"), dict) else {}
    )
    section = (
        entries.get("svc", {}).get("settings") if isinstance(entries.get("svc"), dict) else None
    )
    return dict(section) if isinstance(section, dict) else data


def _chat_config(config: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The config to run with and whether to start the embedded sandbox.

    The embedded sandbox only stands in when nothing names a service: no ``environment``, no
    ``svcApiKey`` (in the file or ``$SVC_API_KEY``) and no ``baseUrl``. An explicit environment
    is validated first (``moon`` is refused) and a remote one needs a key.
    """
    from .config import ConfigError, load_config, resolve_base_url

    from_variable = False
    if not config.get("svcApiKey") and os.environ.get(KEY_VARIABLE, "").strip():
        config = {**config, "svcApiKey": os.environ[KEY_VARIABLE].strip()}
        from_variable = True
    try:
        parsed = load_config(config)
    except ConfigError as exc:
        text = str(exc)
        if from_variable:
            text = text.replace("svcApiKey", f"${KEY_VARIABLE}")
        raise SystemExit(f"svc-gateway: {text}") from None
    if "environment" not in config and not config.get("svcApiKey") and not config.get("baseUrl"):
        return config, True
    try:
        resolve_base_url(parsed, parsed.environment)
    except ConfigError as exc:
        raise SystemExit(f"svc-gateway: {exc}") from None
    if parsed.environment != "local" and parsed.svc_api_key is None:
        from .account.credentials import CredentialStore

        if CredentialStore().load(parsed.environment) is None:
            raise SystemExit(
                f"svc-gateway: environment '{parsed.environment}' needs an API key and none is "
                f"configured. Set {KEY_VARIABLE}=<env>:<API_KEY> in the environment, or put "
                "svcApiKey in the config file; or leave out environment, svcApiKey and baseUrl "
                "to chat with the embedded sandbox."
            )
    return config, False


async def _check_variable_key(core: PluginCore, config: dict[str, Any]) -> str | None:
    """A key taken from ``$SVC_API_KEY`` is checked with the service at start, as
    ``/svc_login`` checks a typed one: the refusal to print (then exit), else ``None``; a
    service that cannot say is told on one line and the chat starts."""
    from .account.core import KeyUnchecked
    from .config import ConfigError

    variable = os.environ.get(KEY_VARIABLE, "").strip()
    if not variable or config.get("svcApiKey") != variable or core.session is None:
        return None
    try:
        await core.runtime.run(core.check_key())
    except KeyUnchecked as exc:
        print(f"svc-gateway: ${KEY_VARIABLE} was not checked: {exc}")
    except ConfigError as exc:
        return f"svc-gateway: ${KEY_VARIABLE}: {exc}"
    return None


def _handler_from_cwd(config: dict[str, Any]) -> str | None:
    """``agentHandler`` names a module Python cannot find but the working directory holds: add
    the directory to the module path (as ``python -m`` would) and return a note saying so."""
    import importlib.util

    spec = config.get("agentHandler")
    if not isinstance(spec, str) or ":" not in spec:
        return None
    top = spec.partition(":")[0].split(".")[0]
    try:
        if not top or importlib.util.find_spec(top) is not None:
            return None
    except (ImportError, ValueError):
        return None
    cwd = Path.cwd()
    if not ((cwd / f"{top}.py").is_file() or (cwd / top).is_dir()):
        return None
    sys.path.insert(0, str(cwd))
    return f"agentHandler: added the working directory {cwd} to the module path to import {top}"


async def _chat(args: argparse.Namespace) -> int:
    from . import register
    from .account.credentials import CredentialStore
    from .config import ConfigError
    from .hosts.embedded import embedded_session
    from .hosts.reference import ReferenceGateway, repl

    config, enabled = _chat_config(_read_config(args.config))
    if note := _handler_from_cwd(config):
        print(note)
    with tempfile.TemporaryDirectory(prefix="svc-chat-") as scratch:
        async with embedded_session(config, enabled) as embedded:
            gateway = ReferenceGateway(embedded.plugin_config, sender_id=args.user)
            if args.demo_tools:
                from .hosts.demo_tools import add_demo_tools

                print(f"Demo host tools: {', '.join(add_demo_tools(gateway))}")
            store = None
            if enabled:  # the embedded sandbox's throwaway key never touches the real keyring
                store = CredentialStore(Path(scratch), use_keyring=False)
            try:
                handle = register(gateway, store=store)
            except ConfigError as exc:
                print(f"svc-gateway: {exc}", file=sys.stderr)
                return 2
            try:
                if embedded.subscriber_key:
                    await handle.runtime.run(handle.core.login(embedded.subscriber_key))
                elif (refused := await _check_variable_key(handle.core, config)) is not None:
                    print(refused, file=sys.stderr)
                    return 2
                if embedded.banner:
                    print(embedded.banner)
                endpoint = handle.extras.get("paid_endpoint")
                if endpoint is not None:
                    print(f"Paid endpoint: POST {getattr(endpoint, 'url', endpoint)}")
                    if card := getattr(endpoint, "card_url", None):
                        print(f"Agent card:    GET  {card}")
                    from .chat.seller_notes import startup_notes

                    for note in startup_notes(handle.core):
                        print(note)
                if (paid_mcp := handle.extras.get("paid_mcp")) is not None:
                    from .chat.seller_notes import mcp_notes

                    for note in mcp_notes(handle.core, paid_mcp.url, paid_mcp.logical_uri("ask")):
                        print(note)
                if (paid_a2a := handle.extras.get("paid_a2a")) is not None:
                    from .chat.seller_notes import a2a_notes

                    for note in a2a_notes(handle.core, paid_a2a.card_url):
                        print(note)
                print(
                    f"svc-gateway {__version__} reference chat. Type /help; "
                    "Ctrl-C cancels a running line or leaves, Ctrl-D leaves."
                )
                return await repl(gateway)
            finally:
                await asyncio.to_thread(handle.close)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="svc-gateway",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at debug level")
    sub = parser.add_subparsers(dest="command", required=True)
    sandbox = sub.add_parser("sandbox", help="serve the local sandbox service")
    sandbox.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1: this machine only)",
    )
    sandbox.add_argument(
        "--port", type=int, default=0, help="port to listen on (default 0: any free port)"
    )
    sandbox.add_argument("--db", default=":memory:", help="SQLite file, or :memory:")
    chat = sub.add_parser("chat", help="the reference chat gateway (embedded sandbox by default)")
    chat.add_argument(
        "--config",
        help=f"JSON file with the plugin config (the key may come from ${KEY_VARIABLE} instead)",
    )
    chat.add_argument(
        "--user",
        help="the chat user who sends the lines (hosted gateway, perUserAccounts); a line "
        "'@name ...' is sent by name",
    )
    chat.add_argument(
        "--demo-tools",
        action="store_true",
        help="add demo host tools (image_gen, web_search) for meteredTools to meter",
    )
    demo = sub.add_parser("demo", help="sell and buy an agent answer end to end, offline")
    demo.add_argument("-q", "--quiet", action="store_true")
    astrbot = sub.add_parser(
        "astrbot-install", help="place the svc plugin into an AstrBot data directory"
    )
    astrbot.add_argument("--data", required=True, help="AstrBot's data directory")
    astrbot.add_argument("--copy", action="store_true", help="copy the files instead of a link")
    astrbot.add_argument("--force", action="store_true", help="replace an existing plugins/svc")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    if args.command == "sandbox":
        from .sandbox import main_sandbox

        return main_sandbox(["--host", args.host, "--port", str(args.port), "--db", args.db])
    if args.command == "chat":
        try:
            return asyncio.run(_chat(args))
        except KeyboardInterrupt:
            return 130
    if args.command == "astrbot-install":
        from .hosts.astrbot.install import InstallError, install

        try:
            done = install(Path(args.data), copy=args.copy, force=args.force)
        except InstallError as exc:
            print(f"svc-gateway: {exc}", file=sys.stderr)
            return 2
        print("\n".join(done))
        return 0
    from .hosts.demo import run_demo

    return asyncio.run(run_demo(quiet=args.quiet))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
