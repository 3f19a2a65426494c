"""The service client is aiohttp only: importing it must not pull in httpx (or rich)."""

from __future__ import annotations

import os
import subprocess
import sys


def test_importing_the_client_does_not_import_httpx() -> None:
    code = (
        "import sys, svc_gateway.client, svc_gateway.transport, svc_gateway.core;"
        "print(sorted(m for m in ('httpx', 'httpcore', 'rich') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ},
        check=True,
    )
    assert done.stdout.strip() == "[]"
