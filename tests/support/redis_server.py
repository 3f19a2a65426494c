"""A real ``redis-server`` for the tests: 127.0.0.1, a free port, no persistence, stopped by pid."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

START_TIMEOUT_SECS = 10.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class RedisServer:
    """``redis-server --save "" --appendonly no`` on 127.0.0.1; can be stopped and started
    again on the same port (it comes back empty, as a Redis without persistence does)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        assert binary, "redis-server is not installed (apt-get install redis-server)"
        for _ in range(5):
            port = self.port or free_port()
            args = ["--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly"]
            args += ["no", "--dir", str(self.workdir), "--protected-mode", "yes"]
            self.proc = subprocess.Popen(
                [binary, *args],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            if self._wait_ready(port):
                self.port = port
                return
            self.stop()
        raise RuntimeError("redis-server did not start")

    def _wait_ready(self, port: int) -> bool:
        deadline = time.monotonic() + START_TIMEOUT_SECS
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                return False  # the port was taken meanwhile
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return True
            except OSError:
                pass
            time.sleep(0.02)
        return False

    def stop(self) -> None:
        """Stop the server (its data is gone: no persistence)."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
