"""The reference gateway: a terminal chat host with no model, implementing the host contract.

Lines starting with ``/`` are commands (``/help``, ``/tools``, ``/context`` and the plugin's);
``svc_checkBalance {"planId": "..."}`` calls a tool. It reads piped standard input too, so a
session can be scripted, and exits cleanly at end of input.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Callable, Mapping
from typing import Any, TextIO

from aiohttp import web

from ..host import (
    BEFORE_PROMPT_BUILD,
    CollectingGateway,
    CommandContext,
    PromptContext,
    ToolResult,
)

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
                "Type /help."
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


async def repl(
    gateway: ReferenceGateway,
    stdin: TextIO = sys.stdin,
    out: Callable[[str], None] = print,
    *,
    prompt: bool | None = None,
) -> int:
    """Read lines until end of input or /quit; print each answer."""
    interactive = stdin.isatty() if prompt is None else prompt
    loop = asyncio.get_running_loop()
    while True:
        if interactive:
            out("svc> ")
        line = await loop.run_in_executor(None, stdin.readline)
        if not line:
            return 0
        if line.strip() in ("/quit", "/exit"):
            return 0
        try:
            answer = await gateway.handle_line(line)
        except Exception as exc:  # a host must keep running whatever a line does
            answer = f"error [host]: {type(exc).__name__}: the line could not be handled"
        if answer:
            out(answer)
