"""Starting the sandbox on loopback: in-process for tests and demos, or as a CLI process.

``main_sandbox`` prints exactly one JSON line (the base URL and two ready accounts) so a
parent process can read it and start talking; logs go to stderr and never carry a key.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sqlite3
import sys
import time
from collections.abc import Callable

from aiohttp import abc, web

from .accounts import create_account
from .app import create_app
from .context import API_PREFIX, STORE
from .db import REQUEST_TTL_SECS

log = logging.getLogger("svc_gateway.sandbox")


class PathOnlyAccessLogger(abc.AbstractAccessLogger):
    """Method, path and status only: query strings and headers may carry keys or tokens."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        self.logger.info(
            "%s %s -> %s (%.1f ms)", request.method, request.path, response.status, time * 1000
        )


class SandboxServer:
    """A running sandbox; ``base_url`` is what clients use as ``{base_url}``."""

    def __init__(self, runner: web.AppRunner, app: web.Application, origin: str) -> None:
        self._runner = runner
        self.app = app
        self.origin = origin
        self.base_url = origin + API_PREFIX

    async def create_account(
        self, label: str = "", api_version: str | None = None
    ) -> dict[str, str]:
        """A new account and key, straight from the store (no HTTP round trip)."""
        return create_account(self.app[STORE], label, api_version)

    async def close(self) -> None:
        await self._runner.cleanup()


async def start_sandbox(
    host: str = "127.0.0.1",
    port: int = 0,
    db: str = ":memory:",
    *,
    clock: Callable[[], float] = time.time,
    request_ttl_secs: float = REQUEST_TTL_SECS,
) -> SandboxServer:
    """Serve the sandbox on the caller's running loop; ``port=0`` picks a free port.

    ``clock`` drives every expiry (see :func:`create_app`); ``request_ttl_secs`` is how long
    a verified ``agentRequestId`` can still be settled.
    """
    app = create_app(db, clock=clock, request_ttl_secs=request_ttl_secs)
    runner = web.AppRunner(app, access_log_class=PathOnlyAccessLogger, access_log=log)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    bound_host, bound_port = runner.addresses[0][:2]
    shown = f"[{bound_host}]" if ":" in str(bound_host) else str(bound_host)
    return SandboxServer(runner, app, f"http://{shown}:{bound_port}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="svc-gateway sandbox",
        description="Run the local sandbox of the Agent Payments Service on loopback.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port (default 0: any free port)")
    parser.add_argument("--db", default=":memory:", help="SQLite file (default: in memory)")
    parser.add_argument(
        "--request-ttl",
        type=float,
        default=REQUEST_TTL_SECS,
        help="seconds a verified agentRequestId can still be settled (default 86400: a day, "
        "so a seller's settle retried after an outage still gets paid)",
    )
    return parser


async def _serve(args: argparse.Namespace) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(signum, stop.set)
        except (NotImplementedError, RuntimeError):  # pragma: no cover - non-POSIX loops
            signal.signal(signum, lambda *_: loop.call_soon_threadsafe(stop.set))
    try:
        server = await start_sandbox(
            args.host, args.port, args.db, request_ttl_secs=args.request_ttl
        )
    except sqlite3.Error as error:
        print(f"svc-gateway sandbox: cannot open database {args.db!r}: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(
            f"svc-gateway sandbox: cannot listen on {args.host}:{args.port}: {error.strerror}",
            file=sys.stderr,
        )
        return 2
    try:
        line = {
            "baseUrl": server.base_url,
            "accounts": {
                "builder": await server.create_account("builder"),
                "subscriber": await server.create_account("subscriber"),
            },
        }
        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()
        # for the person at the terminal, on stderr: stdout stays one parseable JSON line
        print(
            f"svc-gateway sandbox: serving {server.base_url}; API reference at "
            f"{server.origin}/docs (OpenAPI: {server.base_url}/openapi.json). "
            f"Stop it with Ctrl-C (or kill {os.getpid()}).",
            file=sys.stderr,
            flush=True,
        )
        log.info("sandbox serving at %s", server.base_url)
        await stop.wait()
    finally:
        await server.close()
    return 0


def main_sandbox(argv: list[str] | None = None) -> int:
    """``svc-gateway sandbox --host 127.0.0.1 --port 0 --db PATH``; returns the exit code."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exit_:  # --help or a usage error: argparse already printed why
        return exit_.code if isinstance(exit_.code, int) else 2
    if not 0 <= args.port <= 65535:
        print("svc-gateway sandbox: --port must be between 0 and 65535", file=sys.stderr)
        return 2
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.INFO,
            stream=sys.stderr,
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
    try:
        return asyncio.run(_serve(args))
    except KeyboardInterrupt:
        return 0
