"""An ``agentHandler`` module that is slow to import, as an operator's module that loads a model
at import is: its import waits until the file named by ``SVC_TEST_HANDLER_GATE`` exists (at
most :data:`LIMIT_SECS`). The tests hold it closed to see what ``register()`` does without it."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

LIMIT_SECS = 30.0
_gate = os.environ.get("SVC_TEST_HANDLER_GATE")
if _gate:
    _deadline = time.monotonic() + LIMIT_SECS
    while not Path(_gate).exists() and time.monotonic() < _deadline:
        time.sleep(0.01)


async def answer(request: dict[str, Any]) -> dict[str, Any]:
    return {"answer": f"slow handler: {request.get('prompt')}"}
