"""A real AstrBot core (offline) with the svc plugin, driven over JSON lines (tests/hosts/astrbot).

``python astrbot_child.py <root> <spec.json>``: makes an AstrBot root in ``<root>``, places the svc
plugin with ``svc-gateway astrbot-install``'s function, adds a host plugin with one tool of its own
(``image_gen``), points AstrBot at the fake model in the spec, starts the core and then answers
one JSON line per request on stdin (answers are the lines starting with :data:`MARK`):

* ``{"op": "send", "text", "sender", "platform", "group"}`` → the replies AstrBot sent, and the
  ``image_gen`` runs during that message;
* ``{"op": "state"}`` → whether the executor is wrapped, failed plugins, the svc tools' owner,
  the AstrBot commands the svc plugin registered;
* ``{"op": "reload", "plugin"}`` → reloads one plugin as the dashboard does;
* ``{"op": "stop"}`` → stops the core (every plugin's ``terminate``) and reports the state again.

The registries AstrBot keeps are module globals: one process per configuration.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

MARK = "@@SVC-ASTRBOT@@ "
SETTLE_SECS = 30.0
HOST_PLUGIN = '''"""A host plugin with one AstrBot tool of its own, to be metered."""
import json

from astrbot.api.event import AstrMessageEvent, filter
from astrbot.api.star import Context, Star

RUNS: list[dict] = []


class ImageGen(Star):
    def __init__(self, context: Context, config: dict | None = None) -> None:
        super().__init__(context)

    @filter.llm_tool(name="image_gen")
    async def image_gen(self, event: AstrMessageEvent, prompt: str) -> str:
        """Draw an image.

        Args:
            prompt(string): what to draw
        """
        RUNS.append({"sender": event.get_sender_id(), "prompt": prompt})
        if prompt == "fail":
            raise RuntimeError("the image service is down")
        if prompt == "exit":  # failed after producing its answer (in the exception's text)
            raise RuntimeError("exit status 1\\nthe answer is 42")
        return json.dumps({"image": f"img-{len(RUNS)}", "prompt": prompt})
'''


def prepare(root: Path, spec: dict[str, Any]) -> None:
    """The AstrBot root: plugins, the svc settings, AstrBot's config (before importing it)."""
    os.environ["ASTRBOT_ROOT"] = str(root)
    os.environ["ASTRBOT_DISABLE_METRICS"] = "1"
    data = root / "data"
    data.mkdir(parents=True, exist_ok=True)
    from svc_gateway.hosts.astrbot.install import install

    install(data)
    (data / "config" / "svc_gateway.json").write_text(json.dumps(spec["settings"]))
    host = data / "plugins" / "imagegen"
    host.mkdir(parents=True)
    (host / "main.py").write_text(HOST_PLUGIN)
    (host / "metadata.yaml").write_text(
        "name: imagegen\ndesc: a host tool\nversion: 0.1.0\nauthor: tests\n"
    )
    config = {
        "provider_sources": [
            {
                "id": "fakesrc",
                "provider": "openai",
                "type": "openai_chat_completion",
                "provider_type": "chat_completion",
                "enable": True,
                "key": ["sk-fake"],
                "api_base": spec["model_url"],
            }
        ],
        "provider": [
            {
                "id": "fake",
                "provider_source_id": "fakesrc",
                "model": "fake-model",
                "enable": True,
                "type": "openai_chat_completion",
                "provider_type": "chat_completion",
            }
        ],
        "agent_runner": {
            "runner_type": "local",
            "config": {
                "model": {
                    "provider_id": "fake",
                    "fallback_provider_ids": [],
                    "request_max_retries": 1,
                },
            },
        },
        "t2i_endpoint": "http://127.0.0.1:9/text2img",
        "disable_metrics": True,
        "dashboard": {"enable": False, "host": "127.0.0.1"},
        "admins_id": list(spec.get("admins", [])),
    }
    (data / "cmd_config.json").write_text(json.dumps(config))
    sys.path.insert(0, str(root))


def event_class() -> type[Any]:
    from astrbot.core.message.components import Plain
    from astrbot.core.platform.astr_message_event import AstrMessageEvent
    from astrbot.core.platform.astrbot_message import AstrBotMessage, Group, MessageMember
    from astrbot.core.platform.message_type import MessageType
    from astrbot.core.platform.platform_metadata import PlatformMetadata

    class TestEvent(AstrMessageEvent):  # type: ignore[misc]
        def __init__(self, text: str, sender: str, platform: str, group: str | None) -> None:
            message = AstrBotMessage()
            message.type = MessageType.GROUP_MESSAGE if group else MessageType.FRIEND_MESSAGE
            message.self_id = "bot"
            message.session_id = group or sender
            message.message_id = uuid.uuid4().hex
            message.sender = MessageMember(sender, f"user {sender}")
            if group:
                message.group = Group(group)
            message.message = [Plain(text)]
            message.message_str = text
            message.raw_message = None
            meta = PlatformMetadata(
                name="telegram",
                description="tests",
                id=platform,
                support_streaming_message=False,
                support_proactive_message=False,
            )
            super().__init__(text, message, meta, message.session_id)
            self.replies: list[str] = []

        async def send(self, message: Any) -> None:
            if message is not None:
                self.replies.append(message.get_plain_text())
            await super().send(message)

        async def send_streaming(self, generator: Any, use_fallback: bool = False) -> None:
            async for chain in generator:
                self.replies.append(chain.get_plain_text())
            await super().send_streaming(generator, use_fallback)

    return TestEvent


def state(core: Any) -> dict[str, Any]:
    from astrbot.core.astr_agent_tool_exec import FunctionToolExecutor
    from astrbot.core.provider.register import llm_tools
    from astrbot.core.star.filter.command import CommandFilter
    from astrbot.core.star.star_handler import star_handlers_registry

    commands = sorted(
        f.command_name
        for h in star_handlers_registry
        if h.handler_module_path == "data.plugins.svc.main"
        for f in h.event_filters
        if isinstance(f, CommandFilter)
    )
    execute = FunctionToolExecutor.__dict__["execute"].__func__
    owners = {t.name: t.handler_module_path for t in llm_tools.func_list}
    failed = core.plugin_manager.failed_plugin_dict if core is not None else {}
    return {
        "wrapped": bool(getattr(execute, "__svc_metering__", False)),
        "failed": {name: str(info) for name, info in failed.items()},
        "owners": owners,
        "commands": commands,
    }


async def main(root: Path, spec: dict[str, Any]) -> None:
    prepare(root, spec)
    import astrbot.core.core_lifecycle as lifecycle

    async def no_metadata() -> None:  # fetches models.dev: nothing to fetch offline
        return None

    lifecycle.update_llm_metadata = no_metadata
    if spec.get("break_executor"):  # an AstrBot release that changed the executor's shape
        from astrbot.core.astr_agent_tool_exec import FunctionToolExecutor

        async def execute(cls: Any, tool: Any, run_context: Any, call_id: str, **args: Any) -> Any:
            yield None

        FunctionToolExecutor.execute = classmethod(execute)

    from astrbot.core import LogBroker, db_helper

    core = lifecycle.AstrBotCoreLifecycle(LogBroker(), db_helper)
    await core.initialize()
    started = asyncio.create_task(core.start())
    plugins = sys.modules.get("data.plugins.imagegen.main")
    runs: list[dict[str, Any]] = getattr(plugins, "RUNS", [])
    event_type = event_class()
    loop = asyncio.get_running_loop()
    reply({"ready": True, **state(core)})
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            break
        request = json.loads(line)
        try:
            if request["op"] == "send":
                before = len(runs)
                event = event_type(
                    request["text"],
                    request["sender"],
                    request.get("platform", "tg"),
                    request.get("group"),
                )
                await core.event_queue.put(event)
                await settle(core)
                reply({"replies": event.replies, "runs": runs[before:]})
            elif request["op"] == "state":
                reply(state(core))
            elif request["op"] == "reload":  # the dashboard's "reload plugin"
                result = await core.plugin_manager.reload(request["plugin"])
                reply({"result": list(result), **state(core)})
            elif request["op"] == "stop":
                started.cancel()
                await core.stop()
                reply(state(core))
                os._exit(0)  # AstrBot's leftover threads would hold the exit for seconds
        except Exception:
            reply({"error": traceback.format_exc()})


async def settle(core: Any) -> None:
    """Until AstrBot has handled every queued message (at most :data:`SETTLE_SECS`)."""
    deadline = time.monotonic() + SETTLE_SECS
    await asyncio.sleep(0.02)
    while time.monotonic() < deadline:
        if core.event_queue.empty() and not core.event_bus._pending_tasks:
            return
        await asyncio.sleep(0.02)
    raise TimeoutError("AstrBot did not finish the message in time")


def reply(payload: dict[str, Any]) -> None:
    sys.stdout.write(MARK + json.dumps(payload, default=str) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    root_dir, spec_file = Path(sys.argv[1]), Path(sys.argv[2])
    asyncio.run(main(root_dir, json.loads(spec_file.read_text())))
