"""What loading the plugin costs a gateway: only what registration needs is imported.

Checked in a fresh interpreter (this test process has imported everything already). Timings
belong to the benchmarks; this pins the behaviour behind them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import asyncio, json, logging, sys
import svc_gateway
after_import = sorted(sys.modules)
from svc_gateway.host import CollectingGateway, CommandContext
api = CollectingGateway(
    {"environment": "local", "baseUrl": "http://127.0.0.1:9/api/v1", "planId": "p"},
    logging.getLogger("probe"),
)
handle = svc_gateway.register(api)
after_register = sorted(sys.modules)
status = asyncio.run(api.commands["svc_login"].handler(CommandContext(args="status")))
after_first_use = sorted(sys.modules)
handle.close()
print(json.dumps({"import": after_import, "register": after_register, "tools": len(api.tools),
                  "first_use": after_first_use, "status": status}))
"""


def probe(tmp_path: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SVC_")}
    env.update(
        PYTHONPATH=os.pathsep.join([str(ROOT / "plugin"), str(ROOT)]),
        SVC_GATEWAY_CONFIG_DIR=str(tmp_path),
    )
    run = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    data: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    return data


def loaded(modules: list[str], name: str) -> bool:
    return any(m == name or m.startswith(name + ".") for m in modules)


def test_import_and_register_load_only_what_they_need(tmp_path: Path) -> None:
    found = probe(tmp_path)
    assert found["tools"] == 9
    for heavy in ("aiohttp", "httpx", "pydantic", "keyring", "svc_gateway.tools"):
        assert not loaded(found["import"], heavy), f"import svc_gateway loaded {heavy}"
    # Registering with nothing stored: no HTTP server, sandbox, paid endpoint, keyring
    # backends (a few hundred ms to discover) or browser module.
    for unused in (
        "aiohttp.web",
        "svc_gateway.sandbox",
        "svc_gateway.selling",
        "keyring",
        "webbrowser",
        "httpx",  # only svc_queryAgent's calls to other agents use it, imported there
        "rich",
        "a2a",  # the a2a-sdk: only enablePaidA2A and paying an A2A agent import it
        "click",  # the svc command line's library: svc_gateway.svc_cli, never the plugin
        "svc_gateway.svc_cli",
        "mcp",  # the MCP SDK: paid MCP and paying an MCP agent only
        "redis",  # stateUrl and a shared approvals ledger only
        "svc_gateway.approvals.redis_ledger",
        "opentelemetry",  # tracing of the paid path only
        # the tools' modules and their pydantic models load on the first tool call: register
        # hands the host the stored catalogue (tools.json)
        "svc_gateway.tools.base",
        "svc_gateway.tools.builder",
        "svc_gateway.tools.query",
        "svc_gateway.tools.subscriber",
        "svc_gateway.buying",
        # the service client and its wire models load with the first client (first call)
        "svc_gateway.service.client",
        "svc_gateway.service.models",
        # a plain chat config is validated at first use: no pydantic, no PluginConfig, no core
        "pydantic",
        "svc_gateway.config",
        "svc_gateway.account.core",
        "svc_gateway.approvals",
    ):
        assert not loaded(found["register"], unused), f"register loaded {unused}"


def test_the_first_use_validates_the_config_and_builds_the_plugin(tmp_path: Path) -> None:
    found = probe(tmp_path)
    assert found["status"].startswith("Not logged in to the payments service.")
    for needed in ("pydantic", "svc_gateway.config", "svc_gateway.account.core"):
        assert loaded(found["first_use"], needed), f"the first command did not load {needed}"


def test_the_fields_register_reads_match_the_config_models_names_and_defaults() -> None:
    """``startup`` names seven ``PluginConfig`` fields by hand (register must not load the
    model): each alias, default and Python name must be the model's own."""
    from svc_gateway.config import PluginConfig
    from svc_gateway.startup import FIELD_NAMES, OFF_BY_DEFAULT

    by_alias = {f.alias or name: (name, f) for name, f in PluginConfig.model_fields.items()}
    for alias, off in OFF_BY_DEFAULT.items():
        assert alias in by_alias, f"{alias} is no PluginConfig field"
        field = by_alias[alias][1]
        default = field.get_default(call_default_factory=True)
        assert default == off and type(default) is type(off), alias
    expected = {by_alias[alias][0] for alias in (*OFF_BY_DEFAULT, "baseUrl")}
    assert set(FIELD_NAMES) == expected
