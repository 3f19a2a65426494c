"""One Hermes process for one configuration: load the svc plugin into real Hermes Agent 0.19.0,
exercise it, print a JSON report.

Usage: ``python hermes_child.py <scenario> <params.json>``. The parent test prepared
``$HERMES_HOME/config.yaml`` and the environment (see ``hermes_support.run_child``); Hermes
discovers plugins once per process, which is why every configuration gets its own process.

Scenarios:
  host      discovery, tools, the pre_llm_call hook, two full agent turns (real plugin)
  commands  discovery, /svc_login and /svc_logout through the gateway and the CLI (real plugin)
  broken    an invalid config: Hermes records the plugin's error and keeps working
  profiles  two profiles' register() calls in one process (hermes_profiles.py)
  startup   register() with a paid endpoint: nothing heavy before it returns (hermes_startup.py)
  failclosed  a metered tool where the middleware does not run (hermes_failclosed.py)
  topup     an approved metered call that buys the plan and says so (hermes_topup.py)
  standin   the adapter's own guarantees with a stand-in for ``svc_gateway.register``: error JSON,
            no secrets, the hook budget, command names and the Telegram menu

Each section is recorded as ``{"ok": bool, ...}`` (with the traceback when it failed), so one
broken section does not hide the others. The report is the last stdout line after MARK.
"""

from __future__ import annotations

import asyncio
import importlib
import io
import json
import os
import re
import sys
import threading
import time
import traceback
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

MARK = "@@SVC-HERMES-REPORT@@ "
SVC_TOOLS = [
    "svc_checkBalance",
    "svc_createPlan",
    "svc_getAccessToken",
    "svc_listPaymentMethods",
    "svc_listPlans",
    "svc_orderFiatPlan",
    "svc_orderPlan",
    "svc_queryAgent",
    "svc_registerAgent",
]
SPELLINGS = ["svc_login", "svc-login", "svc_logout", "svc-logout"]
FINAL_TEXT = "Your balance is ready."


def hermes(module: str) -> Any:
    """Import a Hermes module (or a sibling of this script) that has no type information."""
    return importlib.import_module(module)


def run_section(report: dict[str, Any], name: str, fn: Callable[[], dict[str, Any]]) -> None:
    started = time.monotonic()
    try:
        result: dict[str, Any] = {"ok": True, **fn()}
    except BaseException:
        result = {"ok": False, "error": traceback.format_exc()}
    result["secs"] = round(time.monotonic() - started, 3)
    report[name] = result


# -- Hermes entry points, the way Hermes itself calls them ------------------------------------


def discovery() -> dict[str, Any]:
    from hermes_cli.plugins import discover_plugins, get_plugin_commands, get_plugin_manager
    from tools.registry import registry

    discover_plugins()
    manager = get_plugin_manager()
    entry = next((p for p in manager.list_plugins() if p.get("key") == "svc"), None)
    tools = sorted(n for n, ts in registry.get_tool_to_toolset_map().items() if ts == "svc")
    definitions = registry.get_definitions(set(tools), quiet=True)
    commands = {
        name: {"description": c.get("description"), "args_hint": c.get("args_hint")}
        for name, c in get_plugin_commands().items()
        if c.get("plugin") == "svc"
    }
    return {
        "plugin": json.loads(json.dumps(entry, default=str)),
        "tools": tools,
        "definitions": definitions,
        "commands": commands,
        "has_pre_llm_call": manager.has_hook("pre_llm_call"),
    }


def gateway_command(text: str) -> str | None:
    """Send ``text`` through the real gateway pipeline: ``GatewayRunner._handle_message``."""
    config = hermes("gateway.config")
    runner = _runner_cache.get("runner")
    if runner is None:
        runner = hermes("gateway.run").GatewayRunner(config.GatewayConfig())
        _runner_cache["runner"] = runner
    source = hermes("gateway.session").SessionSource(
        platform=config.Platform.TELEGRAM,
        chat_id="1001",
        chat_type="dm",
        user_id="42",
        user_name="u",
    )
    event = hermes("gateway.platforms.base").MessageEvent(text=text, source=source)
    reply: str | None = asyncio.run(runner._handle_message(event))
    return reply


_runner_cache: dict[str, Any] = {}


def gateway_lookup(text: str) -> str | None:
    """The gateway's plugin-command step alone (gateway/run.py: ``get_plugin_command_handler(
    command.replace("_", "-"))``, awaiting a coroutine result), on a running loop."""
    from hermes_cli.plugins import get_plugin_command_handler

    source = hermes("gateway.session").SessionSource(
        platform=hermes("gateway.config").Platform.TELEGRAM, chat_id="1"
    )
    event = hermes("gateway.platforms.base").MessageEvent(text=text, source=source)
    command = event.get_command()
    handler = get_plugin_command_handler((command or "").replace("_", "-"))
    if handler is None:
        return None

    async def dispatch() -> Any:
        result = handler(event.get_command_args().strip())
        if asyncio.iscoroutine(result):
            result = await result
        return result

    result = asyncio.run(dispatch())
    return str(result) if result else None


def cli_command(text: str) -> str | None:
    """The CLI's plugin-command step: exact-name lookup + ``resolve_plugin_command_result``."""
    from hermes_cli.plugins import get_plugin_command_handler, resolve_plugin_command_result

    name, _, args = text.lstrip("/").partition(" ")
    handler = get_plugin_command_handler(name.lower())
    if handler is None:
        return None
    result = resolve_plugin_command_result(handler(args.strip()))
    return str(result) if result else None


def cli_process_command(text: str) -> list[str]:
    """The real ``HermesCLI.process_command`` (built without its terminal UI), printed lines."""
    hermes_cli_app = hermes("cli")
    printed: list[str] = []
    original = hermes_cli_app._cprint
    hermes_cli_app._cprint = lambda *a, **_k: printed.append(" ".join(map(str, a)))
    try:
        app = object.__new__(hermes_cli_app.HermesCLI)
        app.config = {}
        app._pending_resume_sessions = None
        app.process_command(text)
    finally:
        hermes_cli_app._cprint = original
    return printed


def telegram_menus() -> dict[str, list[str]]:
    from hermes_cli.commands import telegram_bot_commands, telegram_menu_commands

    return {
        "telegram_bot_commands": [n for n, _ in telegram_bot_commands() if n.startswith("svc")],
        "telegram_menu_commands": [
            n for n, _ in telegram_menu_commands()[0] if n.startswith("svc")
        ],
    }


def dispatch_tool(name: str, args: dict[str, Any]) -> dict[str, Any]:
    """``registry.dispatch`` from this thread (no loop) and from inside ``asyncio.run``."""
    from tools.registry import registry

    plain = registry.dispatch(name, args, task_id="t-plain", session_id="s-plain")

    async def in_loop() -> Any:
        return registry.dispatch(name, args, task_id="t-loop", session_id="s-loop")

    looped = asyncio.run(in_loop())
    return {"plain": plain, "in_loop": looped}


def dispatch_from_one_worker(name: str, args: dict[str, Any], calls: int = 3) -> dict[str, Any]:
    """``registry.dispatch`` ``calls`` times from one worker thread (Hermes runs the async
    handler on that thread's persistent loop), counting the calls that crossed to the plugin
    loop (``PluginRuntime.run``)."""
    from concurrent.futures import ThreadPoolExecutor

    from tools.registry import registry

    from svc_gateway.hosts.hermes import current_handle

    runtime: Any = current_handle().runtime  # type: ignore[union-attr]
    crossings: list[str] = []
    original = runtime.run

    def counting_run(coro: Any) -> Any:
        crossings.append(threading.current_thread().name)
        return original(coro)

    runtime.run = counting_run
    try:
        with ThreadPoolExecutor(1, thread_name_prefix="hermes-worker") as pool:
            results = [
                pool.submit(
                    registry.dispatch, name, args, task_id=f"t-w{i}", session_id="s-w"
                ).result()
                for i in range(calls)
            ]
    finally:
        del runtime.run
    return {"results": results, "crossings": len(crossings)}


def invoke_pre_llm_call(message: str = "What is my balance?") -> list[Any]:
    from hermes_cli.plugins import invoke_hook

    results: list[Any] = invoke_hook(
        "pre_llm_call",
        session_id="s-hook",
        task_id="t-hook",
        turn_id="turn-1",
        user_message=message,
        conversation_history=[],
        is_first_turn=True,
        model="fake-model",
        platform="telegram",
        sender_id="42",
    )
    return results


# -- scenario: host ----------------------------------------------------------------------------


def agent_turn(plan_id: str, in_executor: bool) -> dict[str, Any]:
    from run_agent import AIAgent

    FakeLLM = hermes("fake_llm").FakeLLM

    with FakeLLM("svc_checkBalance", {"planId": plan_id}, FINAL_TEXT) as llm:

        def turn() -> dict[str, Any]:
            agent = AIAgent(
                base_url=llm.base_url,
                api_key="sk-fake",
                provider="custom",
                model="fake-model",
                quiet_mode=True,
                enabled_toolsets=["svc"],
                skip_context_files=True,
                skip_memory=True,
                platform="telegram",
                max_iterations=4,
                tool_delay=0,
            )
            result: dict[str, Any] = agent.run_conversation(
                user_message="What is my balance?", task_id=f"task-{uuid.uuid4().hex[:8]}"
            )
            return result

        if in_executor:

            async def main() -> dict[str, Any]:
                loop = asyncio.get_running_loop()
                return await loop.run_in_executor(None, turn)

            result = asyncio.run(main())
        else:
            result = turn()
        requests = list(llm.requests)
    return {
        "final_response": result.get("final_response"),
        "requests": [
            {
                "tools": sorted(
                    t.get("function", {}).get("name", "") for t in (body.get("tools") or [])
                ),
                "messages": [
                    {
                        "role": m.get("role"),
                        "content": m.get("content")
                        if isinstance(m.get("content"), str)
                        else json.dumps(m.get("content")),
                        "name": m.get("name"),
                        "tool_calls": [
                            c.get("function", {}).get("name") for c in (m.get("tool_calls") or [])
                        ],
                    }
                    for m in body.get("messages") or []
                ],
            }
            for body in requests
        ],
    }


def scenario_host(params: dict[str, Any], report: dict[str, Any]) -> None:
    plan_id = params["planId"]
    run_section(report, "discovery", discovery)
    run_section(report, "tools", lambda: dispatch_tool("svc_checkBalance", {"planId": plan_id}))
    run_section(
        report,
        "worker_tools",
        lambda: dispatch_from_one_worker("svc_checkBalance", {"planId": plan_id}),
    )

    def full_path() -> dict[str, Any]:
        from model_tools import handle_function_call

        return {
            "result": handle_function_call(
                "svc_checkBalance",
                {"planId": plan_id},
                task_id="t-full",
                tool_call_id="call-full",
                session_id="s-full",
            )
        }

    run_section(report, "handle_function_call", full_path)

    def hook() -> dict[str, Any]:
        from svc_gateway.hosts.hermes import current_handle

        handle = current_handle()
        runtime = handle.runtime  # type: ignore[union-attr]
        crossings: list[str] = []
        original = runtime.run_sync

        def counting_run_sync(*args: Any, **kwargs: Any) -> Any:
            crossings.append(threading.current_thread().name)
            return original(*args, **kwargs)

        runtime.run_sync = counting_run_sync  # type: ignore[method-assign]
        try:
            first = invoke_pre_llm_call()
            after_first = len(crossings)
            second = invoke_pre_llm_call()
        finally:
            del runtime.run_sync
        return {
            "results": first,
            "again": second,
            "loop_crossings_first": after_first,
            "loop_crossings_again": len(crossings) - after_first,
        }

    run_section(report, "hook", hook)

    def skill() -> dict[str, Any]:
        skills_tool = hermes("tools.skills_tool")
        from tools.registry import registry

        (order,) = [d["function"] for d in registry.get_definitions({"svc_orderPlan"}, quiet=True)]
        return {
            "view": json.loads(skills_tool.skill_view("svc:payments")),
            "order_description": order["description"],
        }

    run_section(report, "skill", skill)
    run_section(report, "agent_turn", lambda: agent_turn(plan_id, in_executor=False))
    run_section(report, "agent_turn_executor", lambda: agent_turn(plan_id, in_executor=True))


# -- scenario: commands ------------------------------------------------------------------------


def scenario_commands(params: dict[str, Any], report: dict[str, Any]) -> None:
    key = params["subscriberKey"]
    plan_id = params["planId"]
    run_section(report, "discovery", discovery)
    run_section(report, "menu", telegram_menus)

    def balance() -> str:
        from tools.registry import registry

        out: str = registry.dispatch("svc_checkBalance", {"planId": plan_id}, task_id="t")
        return out

    def flow() -> dict[str, Any]:
        steps: dict[str, Any] = {"before": balance()}
        steps["gateway_login"] = gateway_command(f"/svc_login {key}")
        steps["after_gateway_login"] = balance()
        # the person's own commands (issue 25) reach the plugin through the gateway too
        steps["gateway_allow"] = gateway_command("/svc_allow 2 USD per day")
        steps["gateway_approve"] = gateway_command("/svc_approve NOCODE")
        steps["gateway_logout"] = gateway_command("/svc_logout")
        steps["after_gateway_logout"] = balance()
        steps["cli_login"] = cli_command(f"/svc_login {key}")
        steps["after_cli_login"] = balance()
        steps["cli_logout"] = cli_command("/svc_logout")
        steps["after_cli_logout"] = balance()
        steps["cli_app_login"] = cli_process_command(f"/svc_login {key}")
        steps["after_cli_app_login"] = balance()
        steps["cli_app_logout"] = cli_process_command("/svc_logout")
        steps["after_cli_app_logout"] = balance()
        # The operator's way that never types the key: a variable set before the gateway ran.
        steps["env_missing"] = gateway_command("/svc_login env:SVC_UNSET_VARIABLE")
        os.environ["SVC_OPERATOR_KEY"] = key
        steps["env_login"] = cli_command("/svc_login env:SVC_OPERATOR_KEY")
        steps["after_env_login"] = balance()
        steps["env_logout"] = cli_command("/svc_logout")
        # The browser flow: the reply carries the login link at once, the callback server runs
        # on the plugin loop; "the browser" here is urllib following the sandbox's redirect.
        reply = gateway_command("/svc_login local") or ""
        steps["browser_reply"] = reply
        match = re.search(r"https?://\S+/auth/cli\?callback_url=\S+", reply)
        if match is not None:
            with urllib.request.urlopen(match.group(0), timeout=10) as page:
                steps["browser_page_status"] = page.status
            deadline = time.monotonic() + 5
            status = ""
            while time.monotonic() < deadline:
                status = cli_command("/svc_login status") or ""
                if status.startswith("Logged in"):
                    break
                time.sleep(0.05)
            steps["browser_status"] = status
            steps["after_browser_login"] = balance()
            steps["browser_logout"] = gateway_command("/svc_logout")
            steps["after_browser_logout"] = balance()
        return steps

    run_section(report, "flow", flow)


# -- scenario: broken ------------------------------------------------------------------------


def scenario_broken(params: dict[str, Any], report: dict[str, Any]) -> None:
    run_section(report, "discovery", discovery)

    def tool() -> dict[str, Any]:
        from tools.registry import registry

        return {"result": registry.dispatch("svc_checkBalance", {}, task_id="t")}

    run_section(report, "tool", tool)
    run_section(
        report,
        "status",
        lambda: {
            "gateway": gateway_command("/svc_login status"),
            "cli": cli_command("/svc_login status"),
            "hook": invoke_pre_llm_call(),
        },
    )


# -- scenario: standin -------------------------------------------------------------------------

#: Looks like an API key; it must never reach a tool result, a reply or a log line.
FAKE_SECRET = "local:eyJhbGciOiJub25lIn0.eyJzdWIiOiIweDAwMDAwMDAwMDAwMDAwMDAwMDAwIn0.c2ln"


def install_standin() -> dict[str, Any]:
    """Replace ``svc_gateway.register`` with a small plugin on the real contract and runtime."""
    import svc_gateway
    from svc_gateway.host import (
        BEFORE_PROMPT_BUILD,
        CommandContext,
        CommandSpec,
        GatewayAPI,
        PromptContext,
        ToolResult,
        ToolSpec,
    )
    from svc_gateway.runtime import PluginRuntime

    state: dict[str, Any] = {"hook_mode": "fast", "threads": [], "commands": [], "config": None}

    class Handle:
        def __init__(self, runtime: PluginRuntime) -> None:
            self.runtime = runtime

        def close(self) -> None:
            self.runtime.close()

    def standin_register(api: GatewayAPI, **_options: Any) -> Handle:
        runtime = PluginRuntime()
        state["config"] = dict(api.plugin_config)

        def bridged(fn: Callable[..., Any]) -> Callable[..., Any]:
            async def outer(arg: Any) -> Any:
                return await runtime.run(fn(arg))

            return outer

        async def ok(params: dict[str, Any]) -> ToolResult:
            state["threads"].append(threading.current_thread().name)
            return ToolResult.ok({"echo": params})

        async def refused(params: dict[str, Any]) -> ToolResult:
            return ToolResult.error("not_logged_in", "Nobody is logged in.", "Run /svc_login")

        async def broken(params: dict[str, Any]) -> ToolResult:
            raise RuntimeError(f"upstream rejected {FAKE_SECRET}")

        schema = {"type": "object", "properties": {"x": {"type": "integer"}}}
        for name, fn in (("svc_ok", ok), ("svc_refused", refused), ("svc_broken", broken)):
            api.register_tool(ToolSpec(name, f"stand-in {name}", schema, bridged(fn)))

        async def login(ctx: CommandContext) -> str:
            state["commands"].append(["login", ctx.args, threading.current_thread().name])
            if ctx.args == "explode":
                raise ValueError(f"bad key {FAKE_SECRET}")
            return f"login args={ctx.args!r}"

        async def logout(ctx: CommandContext) -> str:
            state["commands"].append(["logout", ctx.args, threading.current_thread().name])
            return "logged out"

        api.register_command(
            CommandSpec("svc_login", "Log in", True, bridged(login), args_hint="<env:KEY>")
        )
        api.register_command(CommandSpec("svc_logout", "Log out", False, bridged(logout)))

        async def context(ctx: PromptContext) -> str | None:
            if state["hook_mode"] == "slow":
                await asyncio.sleep(5)
            if state["hook_mode"] == "broken":
                raise RuntimeError(f"balance failed for {FAKE_SECRET}")
            return f"STANDIN CONTEXT sender={ctx.sender_id} channel={ctx.channel}"

        api.on(BEFORE_PROMPT_BUILD, bridged(context))
        api.logger.info("stand-in registered with key %s", FAKE_SECRET)
        return Handle(runtime)

    setattr(svc_gateway, "register", standin_register)  # noqa: B010 - replace the real entry point
    return state


def scenario_standin(params: dict[str, Any], report: dict[str, Any]) -> None:
    state = install_standin()
    run_section(report, "discovery", discovery)
    report["config_seen"] = state["config"]
    run_section(report, "menu", telegram_menus)

    def tools() -> dict[str, Any]:
        out: dict[str, Any] = {n: dispatch_tool(n, {"x": 1}) for n in ("svc_ok", "svc_refused")}
        out["svc_broken"] = dispatch_tool("svc_broken", {"x": 1})
        out["threads"] = list(state["threads"])
        return out

    run_section(report, "tools", tools)

    def commands() -> dict[str, Any]:
        out: dict[str, Any] = {}
        for spelling in SPELLINGS:
            out[spelling] = {
                "gateway": gateway_command(f"/{spelling} local:KEY"),
                "gateway_lookup": gateway_lookup(f"/{spelling} local:KEY"),
                "cli": cli_command(f"/{spelling} local:KEY"),
                "cli_app": cli_process_command(f"/{spelling} local:KEY"),
            }
        out["explode_gateway"] = gateway_command("/svc_login explode")
        out["explode_cli"] = cli_command("/svc_login explode")
        out["calls"] = list(state["commands"])
        return out

    run_section(report, "commands", commands)

    def hook() -> dict[str, Any]:
        out: dict[str, Any] = {}
        for mode in ("fast", "slow", "broken", "fast"):
            state["hook_mode"] = mode
            started = time.monotonic()
            results = invoke_pre_llm_call()
            out.setdefault(mode, []).append(
                {"results": results, "secs": round(time.monotonic() - started, 3)}
            )
        return out

    run_section(report, "hook", hook)


def skip_env_probe() -> None:
    """Hermes probes ``python3`` and ``pip`` in subprocesses (up to 10 s, 9 s measured on two
    busy cores) for one optional line of its system prompt; no scenario here needs that line."""
    try:
        probe = hermes("tools.env_probe")
        probe._CACHED_LINE = ""
        probe._PROBE_DONE.set()
    except Exception:  # another Hermes: it probes, which is only slower
        pass


def main() -> None:
    skip_env_probe()
    scenario, params_path = sys.argv[1], sys.argv[2]
    params = json.loads(Path(params_path).read_text())
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    report: dict[str, Any] = {"scenario": scenario}
    started = time.monotonic()
    scenarios: dict[str, Callable[[dict[str, Any], dict[str, Any]], None]] = {
        "host": scenario_host,
        "commands": scenario_commands,
        "broken": scenario_broken,
        "standin": scenario_standin,
        "hosted": importlib.import_module("hermes_hosted").scenario_hosted,
        "profiles": importlib.import_module("hermes_profiles").scenario_profiles,
        "startup": importlib.import_module("hermes_startup").scenario_startup,
        "failclosed": importlib.import_module("hermes_failclosed").scenario_failclosed,
        "topup": importlib.import_module("hermes_topup").scenario_topup,
    }
    scenarios[scenario](params, report)
    report["total_secs"] = round(time.monotonic() - started, 3)
    out = io.StringIO()
    json.dump(report, out, default=str)
    sys.stdout.write("\n" + MARK + out.getvalue() + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
