"""Helpers for the Hermes host tests: an isolated Hermes process per configuration, and a local
sandbox service with a plan the subscriber has ordered."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
CHILD = HERE / "hermes_child.py"
MARK = "@@SVC-HERMES-REPORT@@ "
ZERO_ADDRESS = "0x" + "0" * 40
SERVICE_VERSION = "1.1"
#: Variables a developer machine may carry that would point Hermes at a real provider.
_PROVIDER_PREFIXES = ("OPENAI", "OPENROUTER", "ANTHROPIC", "NOUS", "HERMES_")
#: The most one Hermes child may take (the whole hermes run should stay well under 90 s).
CHILD_TIMEOUT_SECS = 60.0


@dataclass(frozen=True)
class ChildRun:
    report: dict[str, Any]
    stdout: str
    stderr: str
    home: Path


def _clean_env(home: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.endswith("_API_KEY")
        and not k.startswith(_PROVIDER_PREFIXES)
        and k not in ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER")  # never open a real browser
    }
    env.update(
        {
            "HERMES_HOME": str(home / "hermes"),
            "HOME": str(home / "user"),
            "XDG_CONFIG_HOME": str(home / "user" / ".config"),
            "XDG_DATA_HOME": str(home / "user" / ".local" / "share"),
            "SVC_GATEWAY_CONFIG_DIR": str(home / "svc-config"),
            # No OS keyring in tests: the plugin falls back to its owner-only credentials file.
            "PYTHON_KEYRING_BACKEND": "keyring.backends.null.Keyring",
            "GATEWAY_ALLOW_ALL_USERS": "true",
            "PYTHONUNBUFFERED": "1",
            "NO_COLOR": "1",
        }
    )
    return env


def write_hermes_home(home: Path, settings: Mapping[str, Any]) -> Path:
    """``$HERMES_HOME/config.yaml`` enabling ``svc`` with ``settings`` (JSON is valid YAML)."""
    hermes_home = home / "hermes"
    hermes_home.mkdir(parents=True, exist_ok=True)
    for sub in ("user", "svc-config"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    config = {"plugins": {"enabled": ["svc"], "entries": {"svc": {"settings": dict(settings)}}}}
    (hermes_home / "config.yaml").write_text(json.dumps(config, indent=2))
    return hermes_home


def run_child(
    scenario: str,
    home: Path,
    settings: Mapping[str, Any],
    params: Mapping[str, Any] | None = None,
) -> ChildRun:
    """Run ``hermes_child.py <scenario>`` in a fresh process with its own ``HERMES_HOME``."""
    write_hermes_home(home, settings)
    params_file = home / "params.json"
    params_file.write_text(json.dumps(dict(params or {})))
    proc = subprocess.run(
        [sys.executable, str(CHILD), scenario, str(params_file)],
        env=_clean_env(home),
        cwd=str(home),
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_SECS,
        check=False,
    )
    report_line = next(
        (line for line in reversed(proc.stdout.splitlines()) if line.startswith(MARK)), None
    )
    if report_line is None:
        raise AssertionError(
            f"hermes child {scenario!r} exited {proc.returncode} without a report\n"
            f"--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-4000:]}"
        )
    return ChildRun(json.loads(report_line[len(MARK) :]), proc.stdout, proc.stderr, home)


def section(run: ChildRun, name: str) -> dict[str, Any]:
    """One report section, failing the test with the child's traceback when it broke."""
    data = run.report.get(name)
    assert data is not None, f"no section {name!r} in report: {sorted(run.report)}"
    assert data["ok"], f"section {name!r} failed in the Hermes child:\n{data.get('error')}"
    return dict(data)


# -- the local sandbox -------------------------------------------------------------------------


@dataclass(frozen=True)
class Account:
    api_key: str
    address: str


@dataclass(frozen=True)
class Sandbox:
    base_url: str
    builder: Account
    subscriber: Account


@contextmanager
def sandbox_process(timeout: float = 30.0) -> Iterator[Sandbox]:
    """Run ``main_sandbox --port 0`` in the background and read its one JSON line."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from svc_gateway.sandbox import main_sandbox; main_sandbox(['--port', '0'])",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + timeout
        info: dict[str, Any] | None = None
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            line = line.strip()
            if line.startswith("{"):
                info = json.loads(line)
                break
        if info is None:
            proc.kill()
            _, err = proc.communicate(timeout=5)
            raise RuntimeError(f"the sandbox did not start: {err[-2000:]}")
        accounts = info["accounts"]
        yield Sandbox(
            base_url=str(info["baseUrl"]).rstrip("/"),
            builder=Account(accounts["builder"]["apiKey"], accounts["builder"]["address"]),
            subscriber=Account(accounts["subscriber"]["apiKey"], accounts["subscriber"]["address"]),
        )
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def _headers(key: str) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {key}",
        "Service-Version": SERVICE_VERSION,
        "Accept": "application/json",
        "Content-Type": "application/json",
    }


def plan_body(name: str, receiver: str, credits: int = 100) -> dict[str, Any]:
    """A crypto plan in the native token, fixed 1 credit per request (WIRE.md §2.4)."""
    return {
        "metadataAttributes": {"name": name, "description": "Hermes host test plan"},
        "priceConfig": {
            "tokenAddress": ZERO_ADDRESS,
            "amounts": ["1000000"],
            "receivers": [receiver],
            "contractAddress": ZERO_ADDRESS,
            "feeController": ZERO_ADDRESS,
            "externalPriceAddress": ZERO_ADDRESS,
            "templateAddress": ZERO_ADDRESS,
            "isCrypto": True,
        },
        "creditsConfig": {
            "isRedemptionAmountFixed": True,
            "redemptionType": 4,
            "onchainMirror": False,
            "durationSecs": "0",
            "amount": str(credits),
            "minAmount": "1",
            "maxAmount": "1",
        },
        "nonce": str(secrets.randbits(128)),
        "isTrialPlan": False,
        "accessLimit": "credits",
    }


def create_ordered_plan(sandbox: Sandbox, name: str = "Hermes test plan") -> str:
    """Register a plan as the builder and order it as the subscriber; return the plan id."""
    with httpx.Client(base_url=sandbox.base_url, timeout=15.0) as client:
        created = client.post(
            "/protocol/plans",
            json=plan_body(name, sandbox.builder.address),
            headers=_headers(sandbox.builder.api_key),
        )
        assert created.status_code < 300, f"register plan: {created.status_code}"
        plan_id = str(created.json()["planId"])
        ordered = client.post(
            f"/protocol/plans/{plan_id}/order", headers=_headers(sandbox.subscriber.api_key)
        )
        assert ordered.status_code < 300, f"order plan: {ordered.status_code}"
    return plan_id


def plan_balance(sandbox: Sandbox, plan_id: str) -> int:
    with httpx.Client(base_url=sandbox.base_url, timeout=15.0) as client:
        answer = client.get(
            f"/protocol/plans/{plan_id}/balance/{sandbox.subscriber.address}",
            headers={"Service-Version": SERVICE_VERSION, "Accept": "application/json"},
        )
        assert answer.status_code == 200, f"balance: {answer.status_code}"
        return int(answer.json()["balance"])
