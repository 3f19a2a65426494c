"""``svc-gateway``'s help and the reference chat as a user runs it: in a terminal (a pty), piped,
and with configurations that must be refused rather than silently replaced by the sandbox."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from aiohttp import web

from svc_gateway.cli import main
from svc_gateway.hosts.reference import ReferenceGateway, repl
from svc_gateway.sandbox import SandboxServer
from tests.support import serve_app

ROOT = Path(__file__).resolve().parents[2]
#: A bound on every wait for the child (a hang fails the test instead of stalling the run).
WAIT_SECS = 60.0


def chat_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SVC_")}
    env.update(
        PYTHONPATH=os.pathsep.join([str(ROOT / "plugin"), str(ROOT)]),
        TMPDIR=str(tmp_path / "tmp"),
        SVC_GATEWAY_CONFIG_DIR=str(tmp_path / "config"),
        PYTHON_KEYRING_BACKEND="keyring.backends.fail.Keyring",
        NO_PROXY="*",
    )
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return env


def run_chat(
    tmp_path: Path, config: dict[str, object], stdin: str = "", **env: str
) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return subprocess.run(
        [sys.executable, "-m", "svc_gateway.cli", "chat", "--config", str(path)],
        input=stdin,
        capture_output=True,
        text=True,
        env={**chat_env(tmp_path), **env},
        timeout=WAIT_SECS,
        check=False,
    )


# -- help ---------------------------------------------------------------------------------------


def test_help_reads_as_plain_text(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert "``" not in text
    for command in ("sandbox", "chat", "demo"):
        assert command in text


def test_sandbox_options_are_explained(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["sandbox", "--help"])
    text = capsys.readouterr().out
    assert "--host HOST  address to listen on" in text
    assert "--port PORT  port to listen on" in text


# -- refused configurations --------------------------------------------------------------------


def test_unknown_environment_is_refused_not_replaced_by_the_sandbox(tmp_path: Path) -> None:
    run = run_chat(tmp_path, {"environment": "moon"}, "/context\n")
    assert run.returncode != 0
    assert "environment" in run.stderr and "'sandbox', 'live' or 'local'" in run.stderr
    assert "embedded sandbox at" not in run.stdout


def test_live_without_a_key_is_refused_with_the_ways_to_give_one(tmp_path: Path) -> None:
    run = run_chat(
        tmp_path, {"environment": "live", "baseUrl": "http://127.0.0.1:9/api/v1"}, "/context\n"
    )
    assert run.returncode != 0
    assert "environment 'live' needs an API key" in run.stderr
    assert "SVC_API_KEY" in run.stderr and "svcApiKey" in run.stderr
    assert "embedded sandbox at" not in run.stdout


# -- the piped chat ------------------------------------------------------------------------------


def test_paid_endpoint_url_is_printed_and_answers(tmp_path: Path) -> None:
    run = run_chat(tmp_path, {"enablePaidEndpoint": True, "paidEndpointPort": 0}, "/help\n")
    assert run.returncode == 0, run.stderr
    (line,) = [ln for ln in run.stdout.splitlines() if ln.startswith("Paid endpoint: POST ")]
    url = line.removeprefix("Paid endpoint: POST ")
    assert url.startswith("http://127.0.0.1:") and url.endswith("/svc/agent")


def test_the_chat_leaves_no_temporary_directory_behind(tmp_path: Path) -> None:
    run = run_chat(tmp_path, {}, "/context\n/svc_login status\n")
    assert run.returncode == 0, run.stderr
    assert "Logged in to local as 0x" in run.stdout
    assert list((tmp_path / "tmp").iterdir()) == []  # svc-chat-* and its credentials file


# -- the interactive chat in a terminal ----------------------------------------------------------


#: Runs in the child before the chat: a new session whose controlling terminal is the pty,
#: so that Ctrl-C typed there becomes SIGINT, as in a real terminal (no preexec_fn: the test
#: process has threads).
OWN_TERMINAL = (
    "import fcntl, os, sys, termios; os.setsid(); fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
    "os.execv(sys.executable, [sys.executable, '-m', 'svc_gateway.cli', 'chat'])"
)


class Terminal:
    """The chat on a pseudo-terminal, as a person at a keyboard sees it."""

    def __init__(self, tmp_path: Path) -> None:
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", OWN_TERMINAL],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=chat_env(tmp_path),
        )
        os.close(slave)
        self.seen = b""

    def read_until(self, marker: bytes) -> bytes:
        deadline = time.monotonic() + WAIT_SECS
        while marker not in self.seen:
            left = deadline - time.monotonic()
            assert left > 0, f"no {marker!r} in {self.seen[-2000:]!r}"
            ready, _, _ = select.select([self.master], [], [], min(left, 1.0))
            if ready:
                try:
                    chunk = os.read(self.master, 4096)
                except OSError:  # the child closed the terminal
                    chunk = b""
                if not chunk:
                    assert marker in self.seen, f"EOF before {marker!r}: {self.seen[-2000:]!r}"
                self.seen += chunk
        return self.seen

    def send(self, data: bytes) -> None:
        os.write(self.master, data)

    def wait(self) -> int:
        try:
            return self.proc.wait(timeout=WAIT_SECS)
        finally:
            self.read_rest()

    def read_rest(self) -> None:
        while select.select([self.master], [], [], 0.2)[0]:
            try:
                chunk = os.read(self.master, 4096)
            except OSError:
                return
            if not chunk:
                return
            self.seen += chunk

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=WAIT_SECS)
        os.close(self.master)


@pytest.fixture
def terminal(tmp_path: Path) -> Iterator[Terminal]:
    term = Terminal(tmp_path)
    try:
        yield term
    finally:
        term.close()


def test_prompt_stays_on_the_input_line_and_ctrl_c_leaves(
    terminal: Terminal, tmp_path: Path
) -> None:
    terminal.read_until(b"svc> ")
    assert not terminal.seen.endswith(b"svc> \r\n")
    terminal.send(b"/context\n")
    shown = terminal.read_until(b"credits, not subscribed")
    assert b"svc> /context\r\n" in shown  # the typed text follows the prompt on one line
    terminal.read_until(b"not subscribed\r\nsvc> ")  # the answer, then the next prompt
    terminal.send(b"\x03")  # Ctrl-C at the prompt
    assert terminal.wait() == 130
    assert b"Traceback" not in terminal.seen
    assert list((tmp_path / "tmp").iterdir()) == []


# -- Ctrl-C while a line is being handled --------------------------------------------------------


class SlowGateway(ReferenceGateway):
    def __init__(self) -> None:
        super().__init__({})
        self.started = asyncio.Event()
        self.finished = False

    async def handle_line(self, line: str) -> str | None:
        if line.strip() == "slow":
            self.started.set()
            await asyncio.sleep(WAIT_SECS)
            self.finished = True
            return "slow answer"
        return f"echo {line.strip()}"


async def test_ctrl_c_during_a_line_cancels_only_that_line() -> None:
    read_fd, write_fd = os.pipe()
    gateway = SlowGateway()
    printed: list[str] = []
    with os.fdopen(read_fd) as stdin, os.fdopen(write_fd, "w") as feed:
        feed.write("slow\n")
        feed.flush()
        chat = asyncio.ensure_future(
            repl(gateway, stdin, printed.append, prompt=True, write_prompt=lambda _p: None)
        )
        await asyncio.wait_for(gateway.started.wait(), WAIT_SECS)
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(int(WAIT_SECS * 20)):
            if "(cancelled)" in printed:
                break
            await asyncio.sleep(0.05)
        assert printed == ["(cancelled)"] and not gateway.finished
        feed.write("after\n/quit\n")
        feed.flush()
        assert await asyncio.wait_for(chat, WAIT_SECS) == 0
    assert printed == ["(cancelled)", "echo after"]


async def test_the_key_can_come_from_svc_api_key(
    tmp_path: Path, sandbox: SandboxServer, subscriber: dict[str, str]
) -> None:
    """The operator sets SVC_API_KEY; the key is never typed and never in the config file."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"environment": "local", "baseUrl": sandbox.base_url}))
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "svc_gateway.cli",
        "chat",
        "--config",
        str(path),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**chat_env(tmp_path), "SVC_API_KEY": subscriber["apiKey"]},
    )
    out, err = await asyncio.wait_for(child.communicate(b"/svc_login status\n"), WAIT_SECS)
    text = out.decode()
    assert child.returncode == 0, err.decode()
    assert f"Logged in to local as {subscriber['address']} (key from the plugin config)" in text
    assert "embedded sandbox" not in text
    assert subscriber["apiKey"].split(":", 1)[1] not in text + err.decode()


async def test_a_refused_key_from_svc_api_key_stops_the_chat_at_start(
    tmp_path: Path, sandbox: SandboxServer, subscriber: dict[str, str], tripwire_url: str
) -> None:
    """The key in $SVC_API_KEY is checked with the service at start, as /svc_login checks a
    typed one: a refused key stops the chat (never "Logged in"); a service that cannot say
    is told on one line and the chat starts."""
    key = subscriber["apiKey"]
    signature = key.rsplit(".", 1)[1]
    corrupted = key[: -len(signature)] + ("A" if signature[0] != "A" else "B") + signature[1:]

    async def chat(base_url: str, api_key: str, name: str) -> tuple[int, str, str]:
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"environment": "local", "baseUrl": base_url}))
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "svc_gateway.cli", "chat", "--config", str(path),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={**chat_env(tmp_path), "SVC_API_KEY": api_key},
        )  # fmt: skip
        out, err = await asyncio.wait_for(child.communicate(b"/svc_login status\n"), WAIT_SECS)
        return child.returncode or 0, out.decode(), err.decode()

    (code, out, err), (unchecked_code, unchecked, _) = await asyncio.gather(
        chat(sandbox.base_url, corrupted, "refused"), chat(tripwire_url, key, "unchecked")
    )
    assert code == 2 and "$SVC_API_KEY: the service refused this API key" in err
    assert "Logged in" not in out and corrupted.split(":", 1)[1] not in out + err
    assert unchecked_code == 0
    assert "$SVC_API_KEY was not checked: the key could not be checked" in unchecked


@pytest.fixture
async def tripwire_url() -> AsyncIterator[str]:
    """A service that answers every request 500: it cannot say whether it takes a key."""

    async def fail(request: web.Request) -> web.Response:
        return web.json_response({"code": "DOWN", "message": "unavailable"}, status=500)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", fail)
    async with serve_app(app, access_log=None) as origin:
        yield f"{origin}/api/v1"
