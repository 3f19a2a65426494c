"""``main_sandbox`` as a real process: one JSON line on stdout, clean exit on SIGINT/SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from svc_gateway.sandbox import main_sandbox

ROOT = Path(__file__).resolve().parents[2]


def launch(*args: str) -> subprocess.Popen[str]:
    code = (
        "import sys; from svc_gateway.sandbox import main_sandbox; "
        f"sys.exit(main_sandbox({list(args)!r}))"
    )
    return subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_cli_prints_one_json_line_and_stops_cleanly(tmp_path: Path, stop: signal.Signals) -> None:
    process = launch("--port", "0", "--db", str(tmp_path / "cli.sqlite"))
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        info = json.loads(line)
        assert info["baseUrl"].startswith("http://127.0.0.1:") and info["baseUrl"].endswith(
            "/api/v1"
        )
        builder, subscriber = info["accounts"]["builder"], info["accounts"]["subscriber"]
        assert builder["address"] != subscriber["address"]
        answer = httpx.get(
            info["baseUrl"] + "/meta/versions",
            headers={"Authorization": f"Bearer {builder['apiKey']}"},
            timeout=5,
        )
        assert answer.status_code == 200 and answer.json()["yourPinnedVersion"] == "1.1"
        process.send_signal(stop)
        out, err = process.communicate(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, err
    assert out == ""  # nothing after the one JSON line
    assert "Traceback" not in err
    origin = info["baseUrl"].removesuffix("/api/v1")
    assert f"API reference at {origin}/docs" in err  # where the docs are, on stderr
    assert f"Stop it with Ctrl-C (or kill {process.pid})." in err
    for account in (builder, subscriber):
        assert account["apiKey"] not in err
        assert account["apiKey"].split(":", 1)[1][:40] not in err


def test_cli_reports_bad_arguments_without_a_traceback(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main_sandbox(["--port", "70000"]) == 2
    assert main_sandbox(["--port", "not-a-port"]) == 2
    assert main_sandbox(["--db", str(tmp_path / "missing-dir" / "x.sqlite")]) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and "cannot open database" in captured.err
    assert captured.out == ""
