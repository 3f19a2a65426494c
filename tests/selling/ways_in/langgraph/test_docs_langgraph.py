"""docs/langgraph.md's walk-through as written: its ``agent.py``, ``app.py`` and
``langgraph.json`` in a fresh directory, and its bash block (curl against the loopback sandbox)
starting the real ``langgraph dev`` as a subprocess, offline, with its own blocking-call
detector on (no ``--allow-blocking``): an unpaid run is 402, a paid one returns the state and a
receipt, and exactly the route's credit is burned."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from svc_gateway.encoding import decode_b64_json
from tests.docs_recipes import LANGGRAPH_DEPLOYMENT, blocks
from tests.support.fixtures import SharedSandbox

ROOT = Path(__file__).resolve().parents[4]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_the_walkthrough_sells_a_run_of_a_langgraph_dev_server(
    sandbox: SharedSandbox, tmp_path: Path
) -> None:
    agent, app, config, script = (text for _, text in blocks(LANGGRAPH_DEPLOYMENT))
    assert "build_payment_app(\n    payments," in app and '"http": {"app"' in config
    (tmp_path / "agent.py").write_text(agent)
    (tmp_path / "app.py").write_text(app)
    (tmp_path / "langgraph.json").write_text(config)
    venv_bin = str(Path(sys.executable).parent)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("LANGSMITH_", "LANGGRAPH_"))},
        "BASE": sandbox.base_url,
        "PORT": str(free_port()),
        "PATH": os.pathsep.join([venv_bin, os.environ.get("PATH", "")]),
        "PYTHONPATH": str(ROOT / "plugin"),
    }
    done = subprocess.run(
        [shutil.which("bash") or "bash", "-euo", "pipefail", "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    server_log = (tmp_path / "langgraph.log").read_text(errors="replace")
    assert done.returncode == 0, done.stderr[-3000:] + server_log[-3000:]
    lines = done.stdout.strip().splitlines()
    assert lines[0] == "unpaid: 402"
    assert json.loads(lines[1]) == {"message": "hi", "echo": "echo: hi"}
    receipt = json.loads(lines[2])
    assert receipt["success"] is True
    assert receipt["creditsRedeemed"] == "1" and receipt["remainingBalance"] == "99"
    assert "BlockingError" not in server_log and "Blocking call" not in server_log
    headers = (tmp_path / "paid-headers.txt").read_text()
    raw = next(h for h in headers.splitlines() if h.lower().startswith("payment-response:"))
    assert decode_b64_json(raw.split(":", 1)[1].strip()) == receipt
