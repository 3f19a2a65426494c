"""Running ``svc`` as a subprocess: a temporary HOME, a file-backed credential store, and a
tripwire service that records any request a refused command would have sent."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from svc_gateway.sandbox import SandboxServer
from svc_gateway.svc_cli.profiles import ProfileBook
from tests.support import serve_app
from tests.support.fixtures import SharedSandbox

ROOT = Path(__file__).resolve().parents[2]
#: A bound on every run (a hang fails the test instead of stalling the suite).
RUN_SECS = 60.0


@dataclass(frozen=True)
class Run:
    """One finished ``svc`` run."""

    args: tuple[str, ...]
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)

    def __str__(self) -> str:
        return f"svc {' '.join(self.args)} -> {self.code}\nstdout: {self.out}\nstderr: {self.err}"


@dataclass
class Svc:
    """``svc`` in a temporary HOME; ``await svc(...)`` runs it and returns the :class:`Run`."""

    home: Path
    env: dict[str, str]
    runs: list[Run] = field(default_factory=list)

    async def __call__(self, *args: str, stdin: str = "", **env: str) -> Run:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "svc_gateway.svc_cli",
            *args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**self.env, **env},
            cwd=self.home,
        )
        try:
            out, err = await asyncio.wait_for(process.communicate(stdin.encode()), RUN_SECS)
        except TimeoutError:
            process.kill()
            await process.wait()
            raise AssertionError(f"svc {' '.join(args)} did not finish in {RUN_SECS} s") from None
        run = Run(args, process.returncode or 0, out.decode(), err.decode())
        assert "Traceback" not in run.err, str(run)
        self.runs.append(run)
        return run

    async def ok(self, *args: str, stdin: str = "", **env: str) -> Run:
        run = await self(*args, stdin=stdin, **env)
        assert run.code == 0, str(run)
        return run

    async def json(self, *args: str, stdin: str = "", **env: str) -> Any:
        """Run with ``--format json``: exit 0 and stdout one JSON document, nothing else."""
        return (await self.ok(*args, "--format", "json", stdin=stdin, **env)).json()

    def write(self, name: str, text: str) -> str:
        path = self.home / name
        path.write_text(text)
        return str(path)


@pytest.fixture
def svc(tmp_path: Path) -> Svc:
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SVC_", "XDG_"))}
    env.update(
        HOME=str(home),
        PYTHONPATH=os.pathsep.join([str(ROOT / "plugin"), str(ROOT)]),
        # no secure keyring here: keys go to the owner-only file, as on a headless server
        PYTHON_KEYRING_BACKEND="keyring.backends.fail.Keyring",
        # loopback HTTP only: aiohttp need not load the CA bundle at import (a tenth of a
        # second of CPU per run)
        SSL_CERT_FILE=os.devnull,
        NO_PROXY="*",
        COLUMNS="100",
    )
    return Svc(home, env)


async def init_profile(svc: Svc, name: str, key: str, base_url: str) -> None:
    """``config init`` with the key on stdin (as a script should pass it)."""
    await svc.ok(
        "--profile", name, "config", "init", "--api-key", "-", "--base-url", base_url,
        stdin=key + "\n",
    )  # fmt: skip


def write_profile(svc: Svc, name: str, key: str, base_url: str) -> None:
    """The profile ``init_profile`` makes, written without a run (a run costs most of a second
    of CPU; ``config init`` itself is tested in test_profiles.py)."""
    book = ProfileBook(svc.home / ".config" / "svc", use_keyring=False)
    book.update(name, environment="local", baseUrl=base_url)
    book.store(name, for_writing=True).save("local", key)


@dataclass
class Tripwire:
    """A stand-in service that answers 500 and remembers every request it got."""

    base_url: str
    requests: list[tuple[str, str]]


@pytest.fixture
async def tripwire() -> AsyncIterator[Tripwire]:
    seen: list[tuple[str, str]] = []

    async def record(request: web.Request) -> web.Response:
        seen.append((request.method, request.path))
        return web.json_response(
            {"code": "TRIPWIRE", "message": "nothing should be sent"}, status=500
        )

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    async with serve_app(app, access_log=None) as origin:
        yield Tripwire(f"{origin}/api/v1", seen)


@pytest.fixture
async def profiles(
    svc: Svc, sandbox: SandboxServer, builder: dict[str, str], subscriber: dict[str, str]
) -> Svc:
    """``builder`` and ``subscriber`` profiles on the sandbox."""
    write_profile(svc, "builder", builder["apiKey"], sandbox.base_url)
    write_profile(svc, "subscriber", subscriber["apiKey"], sandbox.base_url)
    return svc


@pytest.fixture
def sandbox(shared_sandbox: SharedSandbox) -> SharedSandbox:
    """These tests only create accounts of their own: they share the session's sandbox."""
    return shared_sandbox
