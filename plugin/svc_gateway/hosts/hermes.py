"""Hermes Agent 0.19.0 host adapter (entry point ``hermes_agent.plugins: svc``).

Hermes imports this module and calls :func:`register` inside ``discover_plugins()``: once per
process in 0.19.0, once per profile where a gateway runs several profiles in one process
(upstream). Each call gets a plugin of its own, closed only by that profile's unload
(``ctx.on_unload``), a forced rediscovery of that profile, or the process exit.

We build a :class:`svc_gateway.host.GatewayAPI` for the plugin core, let
``svc_gateway.register`` declare its tools, commands and hook, and translate each into Hermes terms:

* **tools** → ``ctx.register_tool(..., toolset="svc", is_async=True)``. Hermes runs async tool
  handlers on per-thread worker loops; the plugin's handlers bridge to the plugin-owned loop, so
  any loop will do. The model always gets a JSON string, errors as ``{"error": {...}}``.
* **commands** → ``ctx.register_command`` twice per name. Verified against 0.19.0 by running
  ``GatewayRunner._handle_message`` and ``HermesCLI.process_command``: the gateway looks plugin
  commands up by ``command.replace("_", "-")`` and the CLI by the exact typed name, so ``svc-login``
  serves the gateway (``/svc_login`` and ``/svc-login``) and an ``svc_login`` alias serves the CLI.
  The alias gets an args hint starting with ``<``, which keeps it out of the Telegram menu
  (``telegram_bot_commands``), so the menu shows ``/svc_login`` once.
* **before_prompt_build** → a synchronous ``pre_llm_call`` hook (Hermes never awaits hook
  coroutines) returning ``{"context": text}``; Hermes appends that to the current user message,
  not the system prompt. A cache hit is answered on Hermes's own thread (the handler's ``peek``);
  only a miss waits for the plugin loop, at most :data:`HOOK_BUDGET_SECS`.
* **an invalid config** → the plugin registers degraded: every tool and ``/svc_login status``
  answer with the error and where to fix it (``plugins.entries.svc.settings`` in config.yaml),
  instead of the model silently having no svc tools.

* **a hosted gateway** (``perUserAccounts``, ``meteredTools``) → the sender of each session (from
  ``pre_llm_call``) and of each gateway command (from ``pre_gateway_dispatch``), and a
  ``tool_execution`` middleware metering the host's own tools (:mod:`.hermes_users`). Tool and
  hook adapters live in :mod:`.hermes_adapters`.

0.19.0 gives command handlers only the argument string: no sender, chat or platform. The
:class:`~svc_gateway.host.CommandContext` carries the platform and sender ``pre_gateway_dispatch``
saw for the gateway message being handled (a message without a user id keeps its platform and
has no sender, hence no account); a CLI or TUI command, run as a loop of its own with no gateway
message, is marked as the local console. Hermes dispatches a plugin command only after its own
gateway authorisation check has passed, hence ``is_authorized_sender`` keeps its default ``True``.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from ..host import (
    BEFORE_PROMPT_BUILD,
    CollectingGateway,
    CommandContext,
    CommandSpec,
)
from ..redact import get_logger
from ..runtime import PluginRuntime, RuntimeClosed
from .hermes_adapters import (
    HOOK_BUDGET_SECS,
    describe_failure,
    make_pre_llm_call,
    make_tool_handler,
    result_json,
    tool_schema,
)
from .hermes_users import (
    MeteringGuard,
    Senders,
    check_metered_names,
    gateway_message,
    make_tool_middleware,
    pre_gateway_dispatch,
    runs_as_own_loop,
)

__all__ = [
    "HOOK_BUDGET_SECS",
    "TOOLSET",
    "HermesGatewayAPI",
    "command_names",
    "make_pre_llm_call",
    "make_tool_handler",
    "register",
    "result_json",
]

#: The Hermes toolset every svc tool belongs to (users can switch it off in ``hermes tools``).
TOOLSET = "svc"
#: The plugin id used when the context does not say (the entry-point name).
PLUGIN_ID = "svc"
TOOL_EMOJI = "💳"

log = get_logger("svc_gateway.hosts.hermes")


class PluginHandleLike(Protocol):
    """What ``svc_gateway.register`` returns, as far as this adapter needs it."""

    def close(self) -> None: ...


_lock = threading.Lock()
#: one live plugin per profile: Hermes's plugin manager (one per ``HERMES_HOME``; upstream runs
#: several profiles in one gateway process) → the handle its ``register()`` call made
_handles: dict[int, tuple[object, PluginHandleLike]] = {}
#: the handle ``register()`` made last (what :func:`current_handle` answers)
_latest: PluginHandleLike | None = None
_atexit_registered = False


# -- the GatewayAPI handed to the plugin core --------------------------------------------------


class HermesGatewayAPI(CollectingGateway):
    """:class:`svc_gateway.host.GatewayAPI` for Hermes: collects what the plugin declares.

    Registrations are buffered and handed to Hermes only after ``register`` returned, so a
    plugin that fails half-way leaves nothing behind in Hermes's registries.
    """

    def __init__(self, plugin_config: Mapping[str, Any], logger: Any, plugin_id: str = PLUGIN_ID):
        super().__init__(plugin_config, logger)
        self.plugin_id = plugin_id
        home = _hermes_home()
        where = f"{home}/config.yaml" if home else "Hermes's config.yaml"
        #: Where the operator fixes a bad configuration (named in degraded-mode answers).
        self.config_location = f"plugins.entries.{plugin_id}.settings in {where}"
        #: The Hermes CLI keeps every typed line, /svc_login <env>:<key> included, here.
        self.input_history = f"{home}/.hermes_history" if home else "~/.hermes/.hermes_history"


def _hermes_home() -> str | None:
    try:
        import importlib

        return str(importlib.import_module("hermes_constants").get_hermes_home())
    except Exception:  # an older or newer Hermes without it: say it generically
        return None


# -- settings ----------------------------------------------------------------------------------


def _plugin_id(ctx: Any) -> str:
    manifest = getattr(ctx, "manifest", None)
    for candidate in (
        getattr(ctx, "plugin_id", None),
        getattr(manifest, "key", None),
        getattr(manifest, "name", None),
    ):
        if isinstance(candidate, str) and candidate:
            return candidate
    return PLUGIN_ID


def _config_keys() -> list[str]:
    from ..config import PluginConfig

    return [field.alias or name for name, field in PluginConfig.model_fields.items()]


_MISSING = object()


def read_settings(ctx: Any) -> dict[str, Any]:
    """The plugin's settings: ``ctx.get_config`` where Hermes has it (newer than 0.19.0), else
    ``load_config()["plugins"]["entries"][<id>]["settings"]``, every level guarded."""
    get_config = getattr(ctx, "get_config", None)
    if callable(get_config):
        settings: dict[str, Any] = {}
        try:
            for key in _config_keys():
                value = get_config(key, _MISSING)
                if value is not _MISSING and value is not None:
                    settings[key] = value
            return settings
        except Exception as error:  # an unexpected get_config signature: use the file instead
            log.debug("ctx.get_config unusable (%s); reading config.yaml", type(error).__name__)
    try:
        from hermes_cli.config import load_config

        node: Any = load_config()
    except Exception as error:
        log.warning(
            "could not read the Hermes config (%s); svc uses defaults", type(error).__name__
        )
        return {}
    for level in ("plugins", "entries", _plugin_id(ctx), "settings"):
        if not isinstance(node, Mapping):
            return {}
        node = node.get(level)
    return dict(node) if isinstance(node, Mapping) else {}


# -- commands ----------------------------------------------------------------------------------


def _menu_hint(hint: str) -> str:
    """An args hint Telegram keeps in its menu: ``<env:KEY>`` becomes ``[env:KEY]``."""
    hint = hint.strip()
    if hint.startswith("<"):
        hint = "[" + hint[1:].rstrip(">").strip() + "]"
    return hint


def command_names(name: str) -> tuple[str, str | None]:
    """``(primary, alias)``: the hyphenated name the gateway looks up, and the underscore
    spelling the CLI needs (``None`` when the name has neither ``_`` nor ``-``)."""
    clean = name.strip().lstrip("/").lower().replace(" ", "-")
    primary = clean.replace("_", "-")
    alias = clean.replace("-", "_")
    return primary, (alias if alias != primary else None)


def make_command_handler(spec: CommandSpec) -> Callable[..., Awaitable[str]]:
    """An async Hermes command handler ``(raw_args) -> str`` that never raises.

    The gateway awaits it on its own loop; the CLI runs it with ``asyncio.run`` (or on a helper
    thread with a 30 s limit when a loop is already running, as in the TUI)."""

    async def handler(raw_args: Any = "", *_args: Any, **_kwargs: Any) -> str:
        args = raw_args.strip() if isinstance(raw_args, str) else ""
        message = gateway_message()  # None from the CLI and TUI
        ctx = CommandContext(
            args=args,
            sender_id=message.sender_id if message else None,
            channel=message.platform if message else None,
            is_local_console=message is None and runs_as_own_loop(handler.__code__),
        )
        try:
            reply = await spec.handler(ctx)
        except RuntimeClosed:
            return "The svc plugin has been shut down; restart the gateway."
        except Exception as error:
            describe_failure(f"command /{spec.name}", error)
            return (
                f"/{spec.name} failed with an internal error ({type(error).__name__}). "
                "Check the gateway log."
            )
        return str(reply) if reply else ""

    handler.__name__ = handler.__qualname__ = f"svc_command_{spec.name}"
    return handler


# -- registration ------------------------------------------------------------------------------


def _register_skills(ctx: Any, plugin_id: str) -> str | None:
    """Register the package's skills (Hermes: ``<plugin>:<name>``, loaded with skill_view).
    Returns the payments skill's qualified name, or ``None`` when this Hermes has no skills."""
    register_skill = getattr(ctx, "register_skill", None)
    if not callable(register_skill):
        return None
    from ..skills import skills

    qualified = None
    for skill in skills():
        try:
            register_skill(skill.name, skill.path, skill.description)
        except Exception as error:  # a skill is an extra: never stop the tools loading
            describe_failure(f"skill {skill.name}", error)
            continue
        if skill.name == "payments":
            qualified = f"{plugin_id}:{skill.name}"
    return qualified


#: Tools whose description points the model to the payments skill (they spend money).
SKILL_POINTERS = ("svc_orderPlan", "svc_orderFiatPlan", "svc_queryAgent")


def _install(ctx: Any, api: HermesGatewayAPI, handle: PluginHandleLike) -> None:
    skill = _register_skills(ctx, api.plugin_id)
    extras = getattr(handle, "extras", None)
    meter = extras.get("meter") if isinstance(extras, dict) else None
    hosted = getattr(handle, "accounts", None) is not None or meter is not None
    senders = Senders() if hosted else None
    for spec in api.tools.values():
        description = spec.description
        if skill is not None and spec.name in SKILL_POINTERS:
            description += f" Before buying, read the skill {skill} (skill_view)."
        ctx.register_tool(
            name=spec.name,
            toolset=TOOLSET,
            schema={**tool_schema(spec), "description": description},
            handler=make_tool_handler(spec, senders),
            is_async=True,
            description=description,
            emoji=TOOL_EMOJI,
        )
    for command in api.commands.values():
        primary, alias = command_names(command.name)
        hint = _menu_hint(command.args_hint) if command.accepts_args else ""
        handler = make_command_handler(command)
        ctx.register_command(primary, handler, description=command.description, args_hint=hint)
        if alias is not None:
            # Starts with "<" on purpose: Hermes leaves such commands out of the Telegram menu,
            # where the primary already appears as /<alias>.
            ctx.register_command(
                alias,
                handler,
                description=f"{command.description} (same as /{primary})",
                args_hint=f"<{hint.strip('[]') or 'alias'}>",
            )
    prompt_handlers = api.hooks.get(BEFORE_PROMPT_BUILD, [])
    runtime = getattr(handle, "runtime", None)
    if prompt_handlers and isinstance(runtime, PluginRuntime):
        hook = make_pre_llm_call(prompt_handlers, runtime, senders=senders)
        ctx.register_hook("pre_llm_call", hook)
    if senders is not None:
        ctx.register_hook("pre_gateway_dispatch", pre_gateway_dispatch)
    if meter is not None and isinstance(runtime, PluginRuntime):
        # Fails closed: where the middleware would not meter a metered tool, pre_tool_call
        # blocks it (registered even when this Hermes has no middleware at all).
        guard = MeteringGuard(lambda name: meter.price_of(name) is not None)
        ctx.register_hook("pre_llm_call", check_metered_names(meter))
        ctx.register_hook("pre_tool_call", guard.pre_tool_call)
        ctx.register_hook("post_tool_call", guard.post_tool_call)
        register_middleware = getattr(ctx, "register_middleware", None)
        if callable(register_middleware):
            middleware = make_tool_middleware(
                meter, senders or Senders(), runtime, result_json, guard
            )
            register_middleware("tool_execution", middleware)
            guard.installed(middleware, _middleware_list(ctx))
        else:
            log.warning(
                "this Hermes has no tool_execution middleware: meteredTools (%s) are blocked, "
                "never run unpaid (Hermes 0.19.0 or newer meters them)",
                ", ".join(sorted(meter.prices)),
            )


def _middleware_list(ctx: Any) -> Callable[[], list[Any] | None]:
    """The ``tool_execution`` middleware list Hermes runs for this profile, read at each call
    (``None`` when this Hermes keeps it where the adapter cannot see it)."""

    def listed() -> list[Any] | None:
        manager = getattr(ctx, "_manager", None)
        if manager is None:
            try:
                from hermes_cli.plugins import get_plugin_manager

                manager = get_plugin_manager()
            except Exception:
                return None
        kinds = getattr(manager, "_middleware", None)
        found = kinds.get("tool_execution") if isinstance(kinds, Mapping) else None
        return list(found) if isinstance(found, list) else ([] if kinds is not None else None)

    return listed


def _close_at_exit() -> None:
    global _latest
    with _lock:
        handles = [handle for _, handle in _handles.values()]
        _handles.clear()
        _latest = None
    for handle in handles:
        _close(handle)


def _close(handle: PluginHandleLike) -> None:
    try:
        handle.close()
    except Exception as error:
        describe_failure("shutdown", error)


def _profile_of(ctx: Any) -> object:
    """Who owns this ``register()`` call: Hermes's plugin manager behind ``ctx`` (one per profile,
    and the same one when a forced rediscovery registers the plugin again), else ``ctx`` itself."""
    manager = getattr(ctx, "_manager", None)
    return manager if manager is not None else ctx


def _unload(profile: object, handle: PluginHandleLike) -> Callable[..., None]:
    """``ctx.on_unload`` callback (newer Hermes): closes this profile's plugin, no other."""

    def unload(*_args: Any, **_kwargs: Any) -> None:
        global _latest
        with _lock:
            if _handles.get(id(profile), (None, None))[1] is handle:
                del _handles[id(profile)]
            if _latest is handle:
                _latest = None
        _close(handle)

    return unload


def current_handle() -> PluginHandleLike | None:
    """The handle of the plugin registered last in this process, if it is still open."""
    return _latest


def register(ctx: Any) -> None:
    """Hermes's entry point: load the svc plugin into this Hermes process.

    An invalid config registers the plugin degraded (see the module docstring); any other
    exception here is recorded by Hermes as the plugin's ``error`` and the host keeps running
    without it. Messages name fields, never values.
    """
    global _latest, _atexit_registered
    from .. import register as register_plugin

    plugin_id = _plugin_id(ctx)
    api = HermesGatewayAPI(read_settings(ctx), get_logger(f"hermes_plugins.{plugin_id}"), plugin_id)
    # A bad config must not leave the model without svc tools and the operator without a clue:
    # every tool and /svc_login status answer with the error and where to fix it.
    # Upstream Hermes runs import + register() under a 10 s deadline (and drops what registers
    # after it): register hands over the tools, commands and hooks only; the paid endpoint, MCP
    # server and A2A agent start on the plugin's loop once register() has returned, and so does
    # the one-line check of the service and stateUrl (a plugin built at start: one that sells,
    # meters or has accounts; a plain chat starts, and is told, at its first use).
    handle: PluginHandleLike = register_plugin(
        api, on_config_error="degrade", background_start=True, check_at_start=True
    )
    try:
        _install(ctx, api, handle)
    except BaseException:
        handle.close()
        raise
    # One plugin per profile: another profile's register() leaves this one running. Only a
    # forced rediscovery of the same profile replaces (and closes) its previous plugin; upstream's
    # ctx.on_unload closes a profile's plugin when Hermes unloads that profile's plugins.
    profile = _profile_of(ctx)
    with _lock:
        previous = _handles.get(id(profile), (None, None))[1]
        _handles[id(profile)] = (profile, handle)
        _latest = handle
        if not _atexit_registered:
            atexit.register(_close_at_exit)
            _atexit_registered = True
    on_unload = getattr(ctx, "on_unload", None)
    if callable(on_unload):
        try:
            on_unload(_unload(profile, handle))
        except Exception as error:  # the process exit still closes it
            describe_failure("ctx.on_unload", error)
    if previous is not None and previous is not handle:
        # A forced rediscovery registered the plugin again; Hermes now calls the new handlers.
        _close(previous)
    log.info(
        "svc plugin loaded into Hermes: %d tools, %d commands, %d prompt hooks",
        len(api.tools),
        len(api.commands),
        len(api.hooks.get(BEFORE_PROMPT_BUILD, [])),
    )
