"""The reference gateway: a terminal chat host with no model, implementing the host contract.

Lines starting with ``/`` are commands (``/help``, ``/tools``, ``/context`` and the plugin's);
``svc_checkBalance {"planId": "..."}`` calls a tool. It reads piped standard input too, so a
session can be scripted, and exits cleanly at end of input.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TextIO

from ..host import (
    BEFORE_PROMPT_BUILD,
    CollectingGateway,
    CommandContext,
    PromptContext,
    ToolResult,
)

if TYPE_CHECKING:
    from aiohttp import web

HELP = """Commands:
  /help                 this text
  /tools                list the tools and their parameters
  /context              show the text injected before each prompt
  /svc_login ...        log in (browser, <env>:<API_KEY>, or status)
  /svc_logout           log out
  /quit                 leave
Tool calls:  <toolName> {json params}   e.g. svc_checkBalance {"planId": "123"}"""


class ReferenceGateway(CollectingGateway):
    """A minimal host: collects what the plugin registers and dispatches to it."""

    def __init__(
        self,
        plugin_config: Mapping[str, Any] | None = None,
        *,
        logger: logging.Logger | None = None,
        http_app: web.Application | None = None,
        sender_id: str = "local-user",
    ) -> None:
        super().__init__(plugin_config or {}, logger or logging.getLogger("svc_gateway.reference"))
        self.http_app = http_app
        self.sender_id = sender_id

    # -- dispatch ----------------------------------------------------------------------------

    async def call_tool(self, name: str, params: dict[str, Any] | None = None) -> ToolResult:
        spec = self.tools.get(name)
        if spec is None:
            return ToolResult.error(
                "unknown_tool", f"No tool named {name}", "Type /tools to list the tools."
            )
        return await spec.handler(dict(params or {}))

    async def run_command(self, name: str, args: str = "", *, authorized: bool = True) -> str:
        spec = self.commands.get(name)
        if spec is None:
            return f"Unknown command /{name}. Type /help."
        ctx = CommandContext(
            args=args, sender_id=self.sender_id, channel="terminal", is_authorized_sender=authorized
        )
        return await spec.handler(ctx)

    async def context_text(self, user_message: str = "") -> str:
        texts = []
        for handler in self.hooks.get(BEFORE_PROMPT_BUILD, []):
            text = await handler(
                PromptContext(
                    sender_id=self.sender_id, channel="terminal", user_message=user_message
                )
            )
            if text:
                texts.append(text)
        return "\n".join(texts)

    async def handle_line(self, line: str) -> str | None:
        """One line of input → the text to print (``None`` for nothing)."""
        line = line.strip()
        if not line or line.startswith("#"):
            return None
        if line.startswith("/"):
            name, _, args = line[1:].partition(" ")
            if name == "help":
                return HELP
            if name == "tools":
                return self._describe_tools()
            if name == "context":
                return await self.context_text() or "(nothing: log in and set a plan)"
            return await self.run_command(name, args.strip())
        name, _, raw = line.partition(" ")
        if name not in self.tools:
            return (
                f"error [unknown_input]: '{name[:40]}' is neither a /command nor a tool. "
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
        return render(await self.call_tool(name, params))

    def _describe_tools(self) -> str:
        lines = []
        for spec in self.tools.values():
            props = spec.parameters.get("properties", {})
            required = set(spec.parameters.get("required", []))
            args = ", ".join(f"{k}{'' if k in required else '?'}" for k in props)
            lines.append(f"{spec.name}({args}): {spec.description}")
        return "\n".join(lines)


def render(result: ToolResult) -> str:
    """A success as indented JSON; an error as one readable line."""
    if result.isError:
        err = result.structuredContent.get("error", {})
        message = str(err.get("message", "")).rstrip(".")
        return f"error [{err.get('code')}]: {message}. Next: {err.get('hint')}"
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
) -> int:
    """Read lines until end of input or /quit; print each answer.

    Interactive (a terminal): the prompt ``svc> `` stays on the input line, and Ctrl-C cancels
    the line being handled, or at the prompt leaves (exit code 130).
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
            try:
                answer = await running
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
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
