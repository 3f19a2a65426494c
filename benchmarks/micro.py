"""In-process figures: tool call vs a bare client call, the context hook, import + register.

The service is the stub facilitator in its own process, so what is measured is the plugin's
own cost (host → runtime → client → loopback HTTP), not the service's.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import procs
from .serve import STUB_PAYER, STUB_PLAN_ID, fake_key


@dataclass(frozen=True)
class Timing:
    median_us: float
    p95_us: float


def _timing(samples: list[float]) -> Timing:
    ordered = sorted(samples)
    return Timing(statistics.median(ordered) * 1e6, ordered[int(len(ordered) * 0.95)] * 1e6)


async def timed(rounds: int, make: Callable[[], Awaitable[object]], warmup: int = 20) -> Timing:
    for _ in range(min(warmup, rounds)):
        await make()
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        await make()
        samples.append(time.perf_counter() - start)
    return _timing(samples)


async def interleaved(
    rounds: int, ops: dict[str, Callable[[], Awaitable[object]]], warmup: int = 20
) -> dict[str, Timing]:
    """One call of each op per round, the order rotating, so every op sees the same noise."""
    names = list(ops)
    for _ in range(warmup):
        for name in names:
            await ops[name]()
    samples: dict[str, list[float]] = {name: [] for name in names}
    for i in range(rounds):
        shift = i % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            await ops[name]()
            samples[name].append(time.perf_counter() - start)
    return {name: _timing(values) for name, values in samples.items()}


async def _measure(service: str, rounds: int) -> dict[str, Timing]:
    import svc_gateway
    from svc_gateway.account.credentials import CredentialStore
    from svc_gateway.hosts.reference import ReferenceGateway
    from svc_gateway.service.client import ServiceClient

    key = fake_key(STUB_PAYER)
    gateway = ReferenceGateway(
        {"environment": "local", "baseUrl": service, "svcApiKey": key, "planId": STUB_PLAN_ID}
    )
    with tempfile.TemporaryDirectory(prefix="svc-bench-") as tmp:
        store = CredentialStore(Path(tmp), use_keyring=False)
        handle = await asyncio.to_thread(svc_gateway.register, gateway, store=store)
        direct = ServiceClient(service, key)
        try:

            async def miss() -> None:
                handle.context.cache.invalidate(STUB_PLAN_ID)
                await gateway.context_text()

            async def tool() -> None:
                result = await gateway.call_tool("svc_checkBalance", {"planId": STUB_PLAN_ID})
                if result.isError:
                    raise RuntimeError(f"svc_checkBalance failed: {result.structuredContent}")

            out = await interleaved(
                rounds,
                {
                    "bare client balance GET": lambda: direct.get_plan_balance(STUB_PLAN_ID),
                    "tool call svc_checkBalance": tool,
                    "context hook miss": miss,
                },
            )
            # where the difference goes: the hop alone, and both calls on the plugin loop
            out["hop: host loop to plugin loop and back"] = await timed(
                rounds, lambda: handle.runtime.run(_nothing())
            )
            out.update(await handle.runtime.run(_on_plugin_loop(handle, rounds)))
            await gateway.context_text()  # fill the cache
            out["context hook hit"] = await timed(rounds * 10, gateway.context_text)
            if not await gateway.context_text():
                raise RuntimeError("the context hook returned no text: nothing was measured")
        finally:
            await direct.aclose()
            await asyncio.to_thread(handle.close)
    return out


async def _nothing() -> None:
    return None


async def _on_plugin_loop(handle: Any, rounds: int) -> dict[str, Timing]:
    """The tool's own work without the hop: ``execute`` vs the plugin's own client's GET,
    both on the plugin loop (same client, same session, same parse)."""
    from svc_gateway.tools import TOOLS, execute

    core, spec = handle.core, TOOLS["svc_checkBalance"]
    client = core.client()

    async def tool() -> None:
        result = await execute(core, spec, {"planId": STUB_PLAN_ID})
        if result.isError:
            raise RuntimeError(f"svc_checkBalance failed: {result.structuredContent}")

    return await interleaved(
        rounds,
        {
            "plugin loop: its client's GET": lambda: client.get_plan_balance(STUB_PLAN_ID),
            "plugin loop: the tool (execute)": tool,
        },
    )


def measure_calls(rounds: int) -> dict[str, Timing]:
    """Tool call, bare client call, context hit and miss against a stub service process."""
    with procs.server("stub") as stub:
        return asyncio.run(_measure(stub + "/api/v1", rounds))


IMPORT_CODE = r"""
import json, sys, tempfile, time
from pathlib import Path
t0 = time.perf_counter()
import aiohttp  # the host's web stack: already loaded in a gateway, so the baseline
t1 = time.perf_counter()
if sys.argv[1] == "pydantic":  # a host that already uses pydantic: imported, one model built
    from pydantic import BaseModel

    class HostModel(BaseModel):
        name: str = ""

    HostModel(name="x")
start = time.perf_counter()  # register's clock starts after the host's own imports
import svc_gateway
from svc_gateway.hosts.reference import ReferenceGateway
from svc_gateway.account.credentials import CredentialStore
gateway = ReferenceGateway({"environment": "local", "baseUrl": "http://127.0.0.1:9/api/v1"})
with tempfile.TemporaryDirectory() as tmp:
    handle = svc_gateway.register(gateway, store=CredentialStore(Path(tmp), use_keyring=False))
    t2 = time.perf_counter()
    handle.close()
print(json.dumps({"baseline_ms": (t1 - t0) * 1e3, "register_ms": (t2 - start) * 1e3,
                  "modules": sorted(m for m in sys.argv[2].split(",") if m in sys.modules)}))
"""
#: Loaded by register or not (a plain chat config must load none of them: it is validated, with
#: pydantic, at its first use).
WATCHED = (
    "pydantic",
    "httpx",
    "rich",
    "mcp",
    "redis",
    "opentelemetry",
    "a2a",
    "click",
    "svc_gateway.selling",
    "svc_gateway.sandbox",
    "svc_gateway.tools.base",
)
#: ``cold``: the host has not loaded pydantic (nor does register); ``pydantic``: the host had it
#: loaded already.
PRELOADS = ("cold", "pydantic")


def _import_env(cache: str) -> dict[str, str]:
    """Bytecode cached, as an installed package has it: this machine's shells set
    PYTHONDONTWRITEBYTECODE, which made every run compile the plugin's sources (aiohttp's and
    pydantic's come precompiled from the venv), so the earlier figures counted our compile."""
    env = procs.child_env({"PYTHONPYCACHEPREFIX": cache})
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _run_import(env: dict[str, str], preload: str, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *flags, "-c", IMPORT_CODE, preload, ",".join(WATCHED)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def measure_import(runs: int) -> dict[str, object]:
    """import + register in fresh interpreters (median of ``runs``), after ``import aiohttp``:
    ``cold`` (pydantic not loaded) and ``pydantic`` (the host had loaded it)."""
    out: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="svc-bench-pyc-") as cache:
        env = _import_env(cache)
        _run_import(env, "cold")  # writes the bytecode cache; not timed
        samples: dict[str, tuple[list[float], list[float]]] = {p: ([], []) for p in PRELOADS}
        for _ in range(runs):
            for preload in PRELOADS:
                done = _run_import(env, preload)
                if done.returncode != 0:
                    raise RuntimeError(f"import + register failed: {done.stderr.strip()[-500:]}")
                data = json.loads(done.stdout.strip().splitlines()[-1])
                samples[preload][0].append(data["baseline_ms"])
                samples[preload][1].append(data["register_ms"])
                out[f"modules_{preload}"] = data["modules"]
        out["baseline_ms"] = statistics.median(samples["cold"][0])
        for preload in PRELOADS:
            out[f"register_ms_{preload}"] = statistics.median(samples[preload][1])
        out["top_imports"] = import_costs(env)
    return out


def import_costs(env: dict[str, str], top: int = 8) -> list[tuple[str, float]]:
    """The modules whose own import time (``-X importtime``, self) is largest among those
    imported after ``import aiohttp``, by import + register: ``(module, ms)``."""
    done = _run_import(env, "cold", "-X", "importtime")
    return top_imports(done.stderr, top)


def top_imports(importtime: str, top: int) -> list[tuple[str, float]]:
    """Read ``-X importtime`` output: the ``top`` largest self times after ``aiohttp``."""
    rows: list[tuple[str, float]] = []
    after = False
    for line in importtime.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        own, _cumulative, name = (part.strip() for part in line[len("import time:") :].split("|"))
        if after:
            rows.append((name, int(own) / 1e3))
        elif name == "aiohttp":
            after = True
    return sorted(rows, key=lambda row: -row[1])[:top]
