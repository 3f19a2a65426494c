"""The AstrBot ``Star``: loads the plugin core and hands its tools, commands and hook to AstrBot.

AstrBot 4.29 binds only handlers defined in the plugin's own module (``data.plugins.<dir>.main``),
so :func:`make_star` builds the class under that module's name, and ``initialize()`` registers,
under the same name, whatever the core registered through the host contract:

* **tools** → ``FunctionTool`` with the JSON Schema verbatim, owned by the plugin module (so they
  go inactive with it); the handler answers a JSON string (AstrBot shows the model ``str()`` of
  anything else, and ``None`` ends the turn silently) and accepts any keys (the core refuses the
  ones its schema does not name).
* **commands** → one AstrBot command per :class:`~svc_gateway.host.CommandSpec` (the approval
  commands too), the raw argument text passed on; it always replies (a silent command would be
  answered by the model).
* **before_prompt_build** → ``on_llm_request``: the text is appended to the system prompt of the
  turn as data (it is not stored in the conversation).
* **the caller** → the event's sender on its platform instance:
  ``Caller(event.get_sender_id(), event.get_platform_id())``, for every tool call, command and
  prompt, so ``perUserAccounts`` needs no mapping.
* **around_tool_call** (``meteredTools``) → :mod:`.metering` wraps AstrBot's tool executor.

The core runs on the plugin's own loop (:class:`~svc_gateway.runtime.PluginRuntime`): every
handler awaits it from AstrBot's loop without blocking it, and ``register`` itself runs on a worker
thread. Settings are a JSON object in ``<AstrBot data>/config/svc_gateway.json``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from astrbot.api.event import filter as astr_filter
from astrbot.api.star import Context, Star
from astrbot.core.agent.tool import FunctionTool
from astrbot.core.star.star_handler import star_handlers_registry
from astrbot.core.utils.astrbot_path import get_astrbot_data_path

from ...host import (
    BEFORE_PROMPT_BUILD,
    Caller,
    CollectingGateway,
    CommandContext,
    CommandSpec,
    PromptContext,
    ToolSpec,
)
from ...redact import get_logger
from ...runtime import RuntimeClosed
from ..hermes_adapters import describe_failure, result_json
from .names import CONTEXT_HEADER, SETTINGS_FILE

if TYPE_CHECKING:
    from ...selling.ways_in.metering import ToolMeter
    from .metering import ExecutorWrap

log = get_logger("svc_gateway.hosts.astrbot")

#: AstrBot's own logger (it logs each message it receives and sends)
ASTRBOT_LOGGER = "astrbot"


def settings_path() -> Path:
    return Path(get_astrbot_data_path()) / "config" / SETTINGS_FILE


def read_settings(path: Path) -> dict[str, Any]:
    """The settings file's object; ``{}`` when there is none. A broken file raises (AstrBot
    then records the plugin as failed, with the message, and runs on without it)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not JSON: {exc.msg} (line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object of the svc plugin settings")
    return data


def caller_of(event: Any) -> Caller | None:
    """The chat user behind an AstrBot event: the sender on its platform instance."""
    try:
        sender = str(event.get_sender_id() or "")
        channel = str(event.get_platform_id() or event.get_platform_name() or "")
    except Exception as error:  # a platform event without these: act for nobody in particular
        log.warning("svc: could not read the sender (%s)", type(error).__name__)
        return None
    return Caller(sender, channel) if sender else None


def command_args(text: str, name: str) -> str:
    """The raw text after the command's name (``message_str`` keeps the name, drops the ``/``)."""
    text = text.strip().lstrip("/").lstrip()
    head, _, rest = text.partition(" ")
    return rest.strip() if head.lower() == name.lower() else text[len(name) :].strip()


class AstrBotGatewayAPI(CollectingGateway):
    """:class:`svc_gateway.host.GatewayAPI` for AstrBot: collects what the core registers."""

    #: every command arrives with its sender, so ``approval`` stays ``"human"`` by default: the
    #: code the plugin hands out is approved by that sender's own ``/svc_approve``
    delivers_commands = True

    def __init__(self, plugin_config: dict[str, Any], location: Path) -> None:
        super().__init__(plugin_config, get_logger("svc_gateway.hosts.astrbot"))
        #: where the operator fixes a bad configuration (named in degraded-mode answers)
        self.config_location = str(location)


# -- adapters ------------------------------------------------------------------------------------


def make_tool_handler(spec: ToolSpec) -> Callable[..., Awaitable[str]]:
    """``await handler(event, **args) -> str``: never raises, never returns ``None``."""

    async def handler(event: Any, **args: Any) -> str:
        try:
            result = await spec.handler(dict(args), caller_of(event))
        except RuntimeClosed:
            return json.dumps({"error": {"code": "plugin_closed", "message": "svc is shut down"}})
        except Exception as error:
            describe_failure(f"tool {spec.name}", error)
            return json.dumps(
                {
                    "error": {
                        "code": "internal",
                        "message": f"{spec.name} failed ({type(error).__name__})",
                        "hint": "Retry; if it keeps failing, check the AstrBot log.",
                    }
                }
            )
        return result_json(result)

    handler.__name__ = handler.__qualname__ = f"svc_tool_{spec.name}"
    return handler


def make_command_handler(
    spec: CommandSpec, module_name: str, authorized: Callable[[Any], bool]
) -> Callable[[Any], AsyncIterator[Any]]:
    """An AstrBot command handler ``(event)`` (AstrBot passes no self to a handler registered
    after load), named and owned so AstrBot files it under the plugin module."""

    async def handler(event: Any) -> AsyncIterator[Any]:
        who = caller_of(event)
        ctx = CommandContext(
            args=command_args(event.get_message_str(), spec.name) if spec.accepts_args else "",
            sender_id=who.sender_id if who else None,
            channel=who.channel if who else None,
            is_authorized_sender=authorized(event),
        )
        try:
            reply = await spec.handler(ctx)
        except RuntimeClosed:
            reply = "The svc plugin has been shut down; restart AstrBot."
        except Exception as error:
            describe_failure(f"command /{spec.name}", error)
            reply = f"/{spec.name} failed ({type(error).__name__}). Check the AstrBot log."
        # Always answer: a command that sends nothing is handed on to the model.
        yield event.plain_result(str(reply) if reply else f"/{spec.name}: done.")
        event.stop_event()

    handler.__name__ = handler.__qualname__ = f"svc_command_{spec.name}"
    handler.__module__ = module_name
    handler.__doc__ = spec.description
    return handler


def make_llm_request_hook(
    gateway: CollectingGateway, module_name: str
) -> Callable[[Any, Any], Awaitable[None]]:
    """``on_llm_request`` ``(event, req)``: the balance context appended to the system prompt."""

    async def hook(event: Any, req: Any) -> None:
        who = caller_of(event)
        prompt = PromptContext(
            sender_id=who.sender_id if who else None,
            channel=who.channel if who else None,
            session_id=getattr(event, "unified_msg_origin", None),
            user_message=getattr(req, "prompt", None),
        )
        texts = []
        for handler in gateway.hooks.get(BEFORE_PROMPT_BUILD, []):
            try:
                text = await handler(prompt)
            except Exception as error:  # a hook never breaks a prompt
                describe_failure("before_prompt_build hook", error)
                continue
            if isinstance(text, str) and text.strip():
                texts.append(text.strip())
        if texts:
            block = "\n".join([CONTEXT_HEADER, *texts])
            system = getattr(req, "system_prompt", None) or ""
            req.system_prompt = f"{system}\n\n{block}" if system else block

    hook.__name__ = hook.__qualname__ = "svc_on_llm_request"
    hook.__module__ = module_name
    return hook


def make_metered_names_check(
    meter: ToolMeter, context: Any, module_name: str
) -> Callable[[Any, Any], Awaitable[None]]:
    """``on_llm_request`` ``(event, req)``: at the first request (every plugin loaded, AstrBot's
    built-in tools made, the MCP servers' listed), warn about each ``meteredTools`` entry that
    names none of the tools AstrBot offers (the reference chat's check, once)."""
    done: list[bool] = []

    async def check(event: Any, req: Any) -> None:
        if done:
            return
        done.append(True)
        names: set[str] = set()
        try:
            names.update(t.name for t in context.provider_manager.llm_tools.func_list)
            offered = getattr(req, "func_tool", None)
            names.update(t.name for t in getattr(offered, "tools", None) or [])
        except Exception as error:  # an AstrBot shaped otherwise: nothing to compare with
            log.info("svc: AstrBot's tools could not be listed (%s)", type(error).__name__)
            return
        meter.warn_unoffered(str(name) for name in names)

    check.__name__ = check.__qualname__ = "svc_check_metered_tools"
    check.__module__ = module_name
    return check


# -- the Star ------------------------------------------------------------------------------------


class SvcPlugin:
    """The plugin inside AstrBot. Not a ``Star`` itself: subclassing ``Star`` registers a plugin
    under the subclass's module, so only :func:`make_star`'s class (in ``main``) is one."""

    context: Context

    module_name = __name__

    def __init__(self, context: Context, config: dict[str, Any] | None = None) -> None:
        super().__init__(context)  # type: ignore[call-arg]  # Star's, next in the MRO
        self.handle: Any = None
        self.gateway: AstrBotGatewayAPI | None = None
        self.wrap: ExecutorWrap | None = None
        self.tools: list[FunctionTool] = []
        self.handlers: list[Any] = []

    async def initialize(self) -> None:
        from ... import register
        from ...redact import install

        # AstrBot logs every inbound message: a key typed in /svc_login must not stay in its log.
        install(ASTRBOT_LOGGER)
        location = settings_path()
        gateway = AstrBotGatewayAPI(read_settings(location), location)
        # register() starts the plugin loop and may wait on it (the paid endpoint): off this loop.
        # The one-line check of the service and stateUrl runs on the plugin loop afterwards
        # (initialize() has no timeout, but a service that is down must not hold AstrBot's start).
        handle = await asyncio.to_thread(
            register, gateway, on_config_error="degrade", check_at_start=True
        )
        self.handle, self.gateway = handle, gateway
        try:
            self._install(gateway, handle)
        except BaseException:
            await self.terminate()
            raise
        log.info(
            "svc plugin loaded into AstrBot: %d tools, %d commands%s",
            len(gateway.tools),
            len(gateway.commands),
            ", metering " + ", ".join(sorted(self.wrap.meter.prices)) if self.wrap else "",
        )

    def _install(self, gateway: AstrBotGatewayAPI, handle: Any) -> None:
        module = self.module_name
        meter = getattr(handle, "extras", {}).get("meter")
        if meter is not None:  # first: an executor we cannot wrap refuses the whole plugin
            from .metering import ExecutorWrap

            self.wrap = ExecutorWrap.install(meter, caller_of)
        for spec in gateway.tools.values():
            tool = FunctionTool(
                name=spec.name,
                description=spec.description,
                parameters=spec.parameters,
                handler=make_tool_handler(spec),
            )
            self.context.add_llm_tools(tool)
            tool.handler_module_path = module  # owned: inactive when the plugin is turned off
            self.tools.append(tool)
        hosted = getattr(handle, "accounts", None) is not None

        def authorized(event: Any) -> bool:
            # A hosted gateway's users each log in their own account; a one-account gateway
            # is logged in (and out) only by AstrBot's admins.
            return hosted or bool(event.is_admin())

        for command in gateway.commands.values():
            handler = make_command_handler(command, module, authorized)
            astr_filter.command(command.name)(handler)
            self.handlers.append(handler)
        if gateway.hooks.get(BEFORE_PROMPT_BUILD):
            hook = make_llm_request_hook(gateway, module)
            astr_filter.on_llm_request()(hook)
            self.handlers.append(hook)
        if meter is not None:
            check = make_metered_names_check(meter, self.context, module)
            astr_filter.on_llm_request()(check)
            self.handlers.append(check)

    async def terminate(self) -> None:
        """Undo the executor wrap, drop what ``initialize`` registered, close the core."""
        if self.wrap is not None:
            self.wrap.restore()
            self.wrap = None
        names = {f"{fn.__module__}_{fn.__name__}" for fn in self.handlers}
        for md in [h for h in star_handlers_registry if h.handler_full_name in names]:
            star_handlers_registry.remove(md)
        self.handlers.clear()
        func_list = self.context.provider_manager.llm_tools.func_list
        for tool in self.tools:
            if tool in func_list:
                func_list.remove(tool)
        self.tools.clear()
        handle, self.handle = self.handle, None
        if handle is not None:
            await asyncio.to_thread(handle.close)


def make_star(module_name: str) -> type[Any]:
    """The plugin's ``Star`` class, defined as if in ``module_name`` (the plugin's ``main``), so
    AstrBot registers it as that plugin's class and files its handlers under it."""
    namespace = {
        "__module__": module_name,
        "module_name": module_name,
        # AstrBot calls terminate() only when the class itself defines it (not inherited)
        "initialize": SvcPlugin.initialize,
        "terminate": SvcPlugin.terminate,
    }
    return type("Main", (SvcPlugin, Star), namespace)
