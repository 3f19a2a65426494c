"""The AstrBot tests' side of the harness: a scripted fake model, one AstrBot child, ledger helpers.

The fake model (OpenAI-compatible, on 127.0.0.1) reads the first text part of the last user
message: ``CALL <tool> <json>`` answers with that tool call; once the conversation holds the tool's
answer it replies ``RESULT <the tool message>``; anything else gets :data:`PLAIN`. Every request
body is recorded, so a test reads exactly what AstrBot offered and sent the model.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from tests.hosts.hermes.fake_llm import FakeLLM
from tests.hosts.hermes.hermes_support import SERVICE_VERSION, Sandbox

HERE = Path(__file__).resolve().parent
CHILD = HERE / "astrbot_child.py"
MARK = "@@SVC-ASTRBOT@@ "
PLAIN = "Hello from the fake model."
#: the most one answer of the child may take (start: about 2 s; a message: about 0.1 s)
ANSWER_TIMEOUT_SECS = 60.0
_PROVIDER_PREFIXES = ("OPENAI", "OPENROUTER", "ANTHROPIC", "ASTRBOT", "DASHBOARD")


def _first_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                return str(part.get("text", ""))
    return ""


class ScriptedModel(FakeLLM):
    """A fake model that calls the tool the user message names (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__("", {}, PLAIN)

    def _answer(self, body: dict[str, Any]) -> tuple[dict[str, Any], str]:
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        if messages and messages[-1].get("role") == "tool":
            text = _first_text(messages[-1].get("content"))
            return {"role": "assistant", "content": f"RESULT {text}"}, "stop"
        users = [m for m in messages if m.get("role") == "user"]
        said = _first_text(users[-1].get("content")).strip() if users else ""
        if said.startswith("CALL "):
            _, name, *rest = said.split(" ", 2)
            call = {
                "id": f"call_{len(self.requests)}",
                "type": "function",
                "function": {"name": name, "arguments": rest[0] if rest else "{}"},
            }
            return {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
        return {"role": "assistant", "content": PLAIN}, "stop"

    def tools_offered(self, index: int = -1) -> dict[str, dict[str, Any]]:
        """The tools of one request, by name (the ``function`` objects)."""
        tools = self.requests[index].get("tools") or []
        return {t["function"]["name"]: t["function"] for t in tools}

    def system_prompt(self, index: int = -1) -> str:
        for message in self.requests[index].get("messages") or []:
            if message.get("role") == "system":
                return _first_text(message.get("content"))
        return ""


def child_env(home: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.endswith("_API_KEY")
        and not k.startswith(_PROVIDER_PREFIXES)
        and k not in ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER", "http_proxy", "https_proxy")
    }
    env.update(
        {
            "HOME": str(home / "user"),
            "XDG_CONFIG_HOME": str(home / "user" / ".config"),
            "SVC_GATEWAY_CONFIG_DIR": str(home / "svc-config"),
            "PYTHON_KEYRING_BACKEND": "keyring.backends.null.Keyring",
            "PYTHONUNBUFFERED": "1",
            "NO_COLOR": "1",
            "no_proxy": "127.0.0.1,localhost",
        }
    )
    return env


class AstrBotChild:
    """One AstrBot process with the svc plugin; :meth:`send` drives a message through it."""

    def __init__(self, home: Path, spec: dict[str, Any]) -> None:
        (home / "user").mkdir(parents=True, exist_ok=True)
        spec_file = home / "spec.json"
        spec_file.write_text(json.dumps(spec))
        self.log = (home / "astrbot.log").open("w")
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD), str(home / "root"), str(spec_file)],
            env=child_env(home),
            cwd=str(home),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )
        self.home = home
        self.output: list[str] = []
        self.ready = self._answer()

    def _answer(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + ANSWER_TIMEOUT_SECS
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            if line.startswith(MARK):
                answer: dict[str, Any] = json.loads(line[len(MARK) :])
                assert "error" not in answer, answer["error"]
                return answer
            self.output.append(line)
        raise AssertionError(f"the AstrBot child gave no answer:\n{self.logs()[-6000:]}")

    def logs(self) -> str:
        self.log.flush()
        return "".join(self.output) + (self.home / "astrbot.log").read_text()

    def request(self, **payload: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(payload) + "\n")
        self.proc.stdin.flush()
        return self._answer()

    def send(
        self, text: str, sender: str, *, platform: str = "tg", group: str | None = None
    ) -> dict[str, Any]:
        """``text`` from ``sender``: ``{"replies": [...], "runs": [image_gen runs]}``."""
        return self.request(op="send", text=text, sender=sender, platform=platform, group=group)

    def close(self) -> dict[str, Any] | None:
        answer = None
        if self.proc.poll() is None:
            with contextlib.suppress(AssertionError, OSError):
                answer = self.request(op="stop")
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()
        self.log.close()
        return answer


def balance_of(sandbox: Sandbox, plan_id: str, holder: str) -> int:
    with httpx.Client(base_url=sandbox.base_url, timeout=15.0) as client:
        answer = client.get(
            f"/protocol/plans/{plan_id}/balance/{holder}",
            headers={"Service-Version": SERVICE_VERSION},
        )
        assert answer.status_code == 200
        return int(answer.json()["balance"])


def new_account(sandbox: Sandbox) -> dict[str, str]:
    with httpx.Client(base_url=sandbox.base_url, timeout=15.0) as client:
        answer = client.post("/sandbox/accounts", json={"label": "astrbot test"})
        assert answer.status_code == 201
        return dict(answer.json())


def tool_message(model: ScriptedModel) -> str:
    """The last tool result AstrBot sent the model."""
    for message in reversed(model.requests[-1]["messages"]):
        if message.get("role") == "tool":
            content = message["content"]
            return content if isinstance(content, str) else json.dumps(content)
    raise AssertionError("no tool message in the last request")


def login(astrbot: AstrBotChild, sender: str, key: str) -> str:
    replies = astrbot.send(f"/svc_login {key}", sender)["replies"]
    assert len(replies) == 1, replies
    return str(replies[0])
