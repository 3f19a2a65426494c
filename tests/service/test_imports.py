"""The service client is aiohttp only: importing it must not pull in httpx (or rich)."""

from __future__ import annotations

import os
import subprocess
import sys

import svc_gateway


def test_importing_the_client_does_not_import_httpx() -> None:
    root = os.path.dirname(os.path.dirname(svc_gateway.__file__))  # this checkout's code
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    code = (
        "import sys, svc_gateway.service.client, svc_gateway.service.transport;"
        "import svc_gateway.account.core;"
        "print(sorted(m for m in ('httpx', 'httpcore', 'rich') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": path},
        check=True,
    )
    assert done.stdout.strip() == "[]"
