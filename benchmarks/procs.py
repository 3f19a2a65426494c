"""Start benchmark servers as child processes and stop them, always, by their own pid."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT_SECS = 60.0


def child_env(extra: dict[str, str] | None = None, drop: tuple[str, ...] = ()) -> dict[str, str]:
    """This checkout's code wins over any installed copy, in every child (without the
    variables named in ``drop``)."""
    env = {k: v for k, v in os.environ.items() if k not in drop}
    # SVC_BENCH_PLUGIN: another tree's plugin/ (a ``git archive`` of an older commit), to
    # measure a before and an after with the same benchmarks
    paths = [env.get("SVC_BENCH_PLUGIN") or str(ROOT / "plugin"), str(ROOT)]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.update(extra or {})
    return env


def read_json_line(proc: subprocess.Popen[str], timeout: float) -> dict[str, Any]:
    """The first stdout line of ``proc`` as JSON, within ``timeout`` seconds."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.2)
        if ready:
            line = proc.stdout.readline()
            if line.startswith("{"):  # a profiler in front may print its own lines first
                data: dict[str, Any] = json.loads(line)
                return data
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
    raise RuntimeError(f"server did not start within {timeout:.0f} s")


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def cpu_split(enabled: bool = True) -> tuple[set[int], set[int]] | None:
    """The CPUs for the server under test and for everything else (the load generator, the
    stub facilitator, this process): the first allowed CPU and the rest, or None when pinning
    is off or fewer than 2 CPUs are allowed. Every side of a comparison gets the same split,
    so none shares its core with its own load generator and stub while another does not."""
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if not enabled or len(allowed) < 2:
        return None
    return {allowed[0]}, set(allowed[1:])


@contextmanager
def pinned(cpus: set[int] | None) -> Iterator[None]:
    """This process (and every child it starts meanwhile, which inherits it) on ``cpus``."""
    if cpus is None:
        yield
        return
    was = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, was)


@contextmanager
def spawn(
    args: list[str],
    env: dict[str, str] | None = None,
    prefix: list[str] | None = None,
    cpus: set[int] | None = None,
    drop: tuple[str, ...] = (),
) -> Iterator[dict[str, Any]]:
    """Run ``python <args>`` (behind ``prefix``, a profiler's command line, when given; on
    ``cpus`` from its first instruction when given; without the environment variables in
    ``drop``); yield its ready line; stop it afterwards.

    stderr goes to a file, never a pipe: a chatty server blocks once a pipe it writes to is
    full, and its tail is shown when the server fails to start.
    """
    with tempfile.TemporaryFile(mode="w+") as errors:
        proc = subprocess.Popen(
            [*(prefix or []), sys.executable, *args],
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            env=child_env(env, drop),
            cwd=ROOT,
            preexec_fn=None if cpus is None else lambda: os.sched_setaffinity(0, cpus),
        )
        try:
            try:
                ready = read_json_line(proc, START_TIMEOUT_SECS)
            except RuntimeError as exc:
                errors.seek(0)
                raise RuntimeError(f"{args}: {exc}: {errors.read()[-800:]}") from None
            yield ready
        finally:
            stop(proc)


@contextmanager
def server(kind: str, *extra: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """A ``benchmarks.serve`` server; yields its URL."""
    with spawn(["-m", "benchmarks.serve", kind, *extra], env) as ready:
        yield str(ready["url"])


@contextmanager
def redis_server() -> Iterator[str]:
    """A throwaway ``redis-server`` on 127.0.0.1 (free port, no persistence); yields its URL."""
    import shutil
    import socket

    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    with tempfile.TemporaryDirectory(prefix="svc-bench-redis-") as tmp:
        args = ["--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no"]
        proc = subprocess.Popen(
            [binary, *args, "--dir", tmp],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            deadline = time.monotonic() + START_TIMEOUT_SECS
            while True:
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
                        conn.sendall(b"PING\r\n")
                        if conn.recv(16).startswith(b"+PONG"):
                            break
                except OSError:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("redis-server did not start")
                time.sleep(0.05)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            stop(proc)


@contextmanager
def ready(kind: str, *extra: str, env: dict[str, str] | None = None) -> Iterator[dict[str, Any]]:
    """A ``benchmarks.serve`` server; yields its whole ready line (URL and any extras)."""
    with spawn(["-m", "benchmarks.serve", kind, *extra], env) as line:
        yield line
