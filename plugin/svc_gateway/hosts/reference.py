"""The reference gateway: a terminal chat host with no model, implementing the host contract.

Lines starting with ``/`` are commands (``/help``, ``/tools``, ``/context`` and the plugin's);
``svc_checkBalance {"planId": "..."}`` calls a tool. It reads piped standard input too, so a
session can be scripted, and exits cleanly at end of input.

It can speak as several chat users: a line ``@alice <line>`` is sent by ``alice`` (``--user`` sets
who sends the other lines). A host of its own tools (``add_host_tool``) runs each call through the
plugin's ``around_tool_call`` handlers, as any host of the contract does.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import signal
import sys
import threading
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TextIO

from ..host import (
    BEFORE_PROMPT_BUILD,
    Caller,
    CollectingGateway,
    CommandContext,
    PromptContext,
    ToolCallContext,
    ToolResult,
)
from ..suggest import did_you_mean

if TYPE_CHECKING:
    from aiohttp import web

HELP = """Commands:
  /help                 this text
  /tools                list the tools and their parameters
  /context              show the text injected before each prompt
  /svc_login ...        log in (browser, <env>:<API_KEY>, or status)
  /svc_logout           log out
  /svc_spend            what you paid for on this gateway
  /svc_earnings         what this gateway sold (operator only)
  /svc_approve <code>   approve a pending purchase (/svc_deny <code> drops it)
  /svc_allow ...        let paid queries spend, e.g. /svc_allow 5 USD per day (or off)
  /quit                 leave
Tool calls:  <toolName> {json params}   e.g. svc_checkBalance {"planId": "123"}
Speak as a chat user:  @alice <line>    e.g. @alice /svc_spend
  (svc-gateway chat --user alice sends the lines without @name as alice)
  @alice /svc_login new opens an account for alice: it needs perUserAccounts in the config
  (svc-gateway chat --demo-tools adds image_gen and web_search for meteredTools to meter)"""

CHANNEL = "terminal"
#: a line still running after this long shows what it waits for (a purchase: the agent)
SLOW_LINE_SECS = 2.0
#: ``@name rest``: a line sent by the chat user ``name``
_AS_USER = re.compile(r"@([A-Za-z0-9_.-]{1,64})\s+(.*)", re.DOTALL)
HostTool = Callable[[dict[str, Any]], Awaitable[Any]]


class ReferenceGateway(CollectingGateway):
    """A minimal host: collects what the plugin registers and dispatches to it."""

    def __init__(
        self,
        plugin_config: Mapping[str, Any] | None = None,
        *,
        logger: logging.Logger | None = None,
        http_app: web.Application | None = None,
        sender_id: str | None = None,
    ) -> None:
        super().__init__(plugin_config or {}, logger or logging.getLogger("svc_gateway.reference"))
        self.http_app = http_app
        #: who sends lines without ``@name`` (``None``: nobody in particular, one-user gateway)
        self.sender_id = sender_id
        #: the host's own tools (not the plugin's), metered through ``around_tool_call``
        self.host_tools: dict[str, HostTool] = {}

    # -- dispatch ----------------------------------------------------------------------------

    def add_host_tool(self, name: str, run: HostTool) -> None:
        """One of the host's own tools: ``await run(arguments)`` returns its result."""
        if name in self.tools or name in self.host_tools:
            raise ValueError(f"tool {name} is already registered")
        self.host_tools[name] = run

    def _caller(self, sender: str | None) -> Caller | None:
        sender = sender if sender is not None else self.sender_id
        return Caller(sender, CHANNEL) if sender else None

    async def call_tool(
        self,
        name: str,
        params: dict[str, Any] | None = None,
        *,
        sender: str | None = None,
    ) -> ToolResult:
        """A plugin tool, called by ``sender`` (default: :attr:`sender_id`)."""
        caller = self._caller(sender)
        arguments = dict(params or {})
        spec = self.tools.get(name)
        if spec is None:
            return ToolResult.error(
                "unknown_tool",
                f"No tool named {name}.{did_you_mean(name, self.tools)}",
                "Type /tools to list the tools.",
            )
        if caller is None:
            return await spec.handler(arguments)
        return await spec.handler(arguments, caller)

    async def call_host_tool(
        self,
        name: str,
        params: dict[str, Any] | None = None,
        *,
        sender: str | None = None,
        call_id: str | None = None,
    ) -> Any:
        """One of the host's own tools, through the plugin's ``around_tool_call`` handlers."""
        run = self.host_tools[name]
        arguments = dict(params or {})
        ctx = ToolCallContext(name, arguments, call_id or uuid.uuid4().hex, self._caller(sender))
        return await self.run_host_tool(ctx, lambda: run(arguments))

    async def run_command(
        self, name: str, args: str = "", *, authorized: bool = True, sender: str | None = None
    ) -> str:
        spec = self.commands.get(name)
        if spec is None:
            known = [*self.commands, "help", "tools", "context"]
            return f"Unknown command /{name}.{did_you_mean(name, known, '/')} Type /help."
        caller = self._caller(sender)
        ctx = CommandContext(
            args=args,
            sender_id=caller.sender_id if caller else None,
            channel=CHANNEL,
            is_authorized_sender=authorized,
            is_local_console=caller is None,  # typed at this terminal, by its operator
        )
        return await spec.handler(ctx)

    async def context_text(self, user_message: str = "", *, sender: str | None = None) -> str:
        texts = []
        caller = self._caller(sender)
        for handler in self.hooks.get(BEFORE_PROMPT_BUILD, []):
            text = await handler(
                PromptContext(
                    sender_id=caller.sender_id if caller else None,
                    channel=CHANNEL,
                    user_message=user_message,
                )
            )
            if text:
                texts.append(text)
        return "\n".join(texts)

    async def handle_line(self, line: str) -> str | None:
        """One line of input → the text to print (``None`` for nothing)."""
        line = line.strip()
        sender = None
        if (as_user := _AS_USER.fullmatch(line)) is not None:
            sender, line = as_user.group(1), as_user.group(2).strip()
        if not line or line.startswith("#"):
            return None
        if line.startswith("/"):
            name, _, args = line[1:].partition(" ")
            if name == "help":
                return HELP
            if name == "tools":
                return self._describe_tools()
            if name == "context":
                text = await self.context_text(sender=sender)
                return text or (
                    "(nothing injected: no balance to show; /svc_login status says whether you "
                    "are logged in, and a plan shows once it is set (planId) or bought)"
                )
            return await self.run_command(name, args.strip(), sender=sender)
        name, _, raw = line.partition(" ")
        if name not in self.tools and name not in self.host_tools:
            return (
                f"error [unknown_input]: '{name[:40]}' is neither a /command nor a tool."
                f"{did_you_mean(name, [*self.tools, *self.host_tools])} "
                "Type /tools to list the tools, /help for the commands."
            )
        try:
            params = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError as exc:
            return (
                f"error [invalid_json]: the parameters are not JSON ({exc.msg}); "
                f'write {name} {{"key": "value"}}'
            )
        if not isinstance(params, dict):
            return (
                'error [invalid_json]: the parameters must be a JSON object, e.g. {"planId": "1"}'
            )
        if name in self.host_tools:
            return render(await self.call_host_tool(name, params, sender=sender))
        return render(await self.call_tool(name, params, sender=sender))

    def waiting_note(self, line: str) -> str | None:
        """What to show while ``line`` runs long: a purchase waits for the agent, up to
        ``requestTimeoutSecs``; ``None`` for any other line."""
        line = line.strip()
        if (as_user := _AS_USER.fullmatch(line)) is not None:
            line = as_user.group(2).strip()
        if line.partition(" ")[0] != "svc_queryAgent":
            return None
        from ..config import load_config

        try:
            secs = load_config(self.plugin_config).request_timeout_secs
        except Exception:  # the plugin refused this config at start: no purchase will run
            return None
        return f"waiting for the agent, up to {secs:g} s…"

    def _describe_tools(self) -> str:
        lines = []
        for spec in self.tools.values():
            props = spec.parameters.get("properties", {})
            required = set(spec.parameters.get("required", []))
            args = ", ".join(f"{k}{'' if k in required else '?'}" for k in props)
            lines.append(f"{spec.name}({args}): {spec.description}")
        return "\n".join(lines)


def render(result: Any) -> str:
    """A success as indented JSON; an error as one readable line."""
    if not isinstance(result, ToolResult):  # a host tool's own result
        return json.dumps(result, indent=2, ensure_ascii=False, default=str)
    if result.isError:
        err = result.structuredContent.get("error", {})
        message = str(err.get("message", "")).rstrip(".")
        stop = "" if message.endswith(("?", "!")) else "."  # never "priceAmounts?."
        return f"error [{err.get('code')}]: {message}{stop} Next: {err.get('hint')}"
    return json.dumps(result.structuredContent, indent=2, ensure_ascii=False)


def _write_prompt(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _start_reader(stdin: TextIO, loop: asyncio.AbstractEventLoop) -> asyncio.Queue[str]:
    """Read lines on a daemon thread (a blocked ``readline`` must never keep the process
    alive at exit, as it would in the loop's default executor); ``""`` marks end of input."""
    lines: asyncio.Queue[str] = asyncio.Queue()

    def read() -> None:
        while True:
            try:
                line = stdin.readline()
            except (OSError, ValueError):  # stdin closed under us
                line = ""
            try:
                loop.call_soon_threadsafe(lines.put_nowait, line)
            except RuntimeError:  # the loop is gone: nobody is listening any more
                return
            if not line:
                return

    threading.Thread(target=read, name="svc-chat-stdin", daemon=True).start()
    return lines


async def repl(
    gateway: ReferenceGateway,
    stdin: TextIO = sys.stdin,
    out: Callable[[str], None] = print,
    *,
    prompt: bool | None = None,
    write_prompt: Callable[[str], None] = _write_prompt,
    slow_secs: float = SLOW_LINE_SECS,
) -> int:
    """Read lines until end of input or /quit; print each answer.

    Interactive (a terminal): the prompt ``svc> `` stays on the input line, and Ctrl-C cancels
    the line being handled, or at the prompt leaves (exit code 130). A purchase still running
    after ``slow_secs`` says it is waiting for the agent, and for how long at most.
    """
    interactive = stdin.isatty() if prompt is None else prompt
    loop = asyncio.get_running_loop()
    lines = _start_reader(stdin, loop)
    waiting: asyncio.Future[str] | None = None
    running: asyncio.Task[str | None] | None = None
    interrupted = False

    def on_interrupt() -> None:
        nonlocal interrupted
        if running is not None and not running.done():
            running.cancel()  # Ctrl-C during a command: end that line
        elif waiting is not None and not waiting.done():
            interrupted = True  # Ctrl-C at the prompt: leave
            waiting.cancel()

    handles_sigint = False
    if interactive and threading.current_thread() is threading.main_thread():
        try:
            loop.add_signal_handler(signal.SIGINT, on_interrupt)
            handles_sigint = True
        except (NotImplementedError, RuntimeError):  # Windows, or a loop without signals
            pass
    try:
        while True:
            if interactive:
                write_prompt("svc> ")
            waiting = asyncio.ensure_future(lines.get())
            try:
                line = await waiting
            except asyncio.CancelledError:
                if not interrupted:
                    raise
                out("")
                return 130
            if not line:
                if interactive:
                    out("")
                return 0
            if line.strip() in ("/quit", "/exit"):
                return 0
            running = asyncio.ensure_future(gateway.handle_line(line))
            note = gateway.waiting_note(line)
            try:
                if note is not None and not (await asyncio.wait({running}, timeout=slow_secs))[0]:
                    out(note)
                answer = await running
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    running.cancel()
                    raise  # the chat itself is being stopped, not just this line
                answer = "(cancelled)"
            except Exception as exc:  # a host must keep running whatever a line does
                answer = f"error [host]: {type(exc).__name__}: the line could not be handled"
            finally:
                running = None
            if answer:
                out(answer)
    finally:
        if handles_sigint:
            loop.remove_signal_handler(signal.SIGINT)
