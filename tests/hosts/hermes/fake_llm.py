"""A scripted OpenAI-compatible chat server on 127.0.0.1 for driving a real Hermes agent turn.

Script: while the conversation has no ``tool`` message, answer with one call to ``tool_name``;
afterwards answer with ``final_text``. ``python -m tests.hosts.hermes.fake_llm`` serves it on a port
of its own, so Hermes can be tried without a model key (docs/hosts.md). Both the streaming (SSE)
and the plain JSON forms are served. Every request body is recorded for assertions. ``POST
/api/show`` (Hermes's model-info probe) gets a 404, which Hermes tolerates.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeLLM:
    def __init__(
        self,
        tool_name: str,
        tool_args: dict[str, Any],
        final_text: str,
        port: int = 0,
        echo_tool: bool = False,
        more_calls: list[tuple[str, dict[str, Any]]] | None = None,
    ) -> None:
        #: further calls the first answer makes beside ``tool_name`` (parallel tool calls)
        self.more_calls = list(more_calls or [])
        #: the final answer also quotes the start of the tool's output (for a person watching)
        self.echo_tool = echo_tool
        self.tool_name = tool_name
        self.tool_args = tool_args
        self.final_text = final_text
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def __enter__(self) -> FakeLLM:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    # -- script ------------------------------------------------------------------------------

    def _answer(self, body: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """The assistant message for this request and its finish reason."""
        messages = body.get("messages") or []
        tools = [m for m in messages if isinstance(m, dict) and m.get("role") == "tool"]
        if tools:
            text = self.final_text
            if self.echo_tool:
                text += "\n" + "\n".join(str(t.get("content") or "")[:300] for t in tools)
            return {"role": "assistant", "content": text}, "stop"
        calls = [
            {
                "id": f"call_{len(self.requests)}_{index}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
            for index, (name, args) in enumerate(
                [(self.tool_name, self.tool_args), *self.more_calls]
            )
        ]
        return {"role": "assistant", "content": None, "tool_calls": calls}, "tool_calls"

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _json(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    self._json(
                        200,
                        {"object": "list", "data": [{"id": "fake-model", "object": "model"}]},
                    )
                else:
                    self._json(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._json(404, {"error": {"message": "not found"}})
                    return
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    self._json(400, {"error": {"message": "bad json"}})
                    return
                with fake._lock:
                    fake.requests.append(body)
                    message, finish = fake._answer(body)
                usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
                created = int(time.time())
                if not body.get("stream"):
                    self._json(
                        200,
                        {
                            "id": "chatcmpl-fake",
                            "object": "chat.completion",
                            "created": created,
                            "model": "fake-model",
                            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                            "usage": usage,
                        },
                    )
                    return
                delta: dict[str, Any] = {"role": "assistant"}
                if message.get("tool_calls"):
                    delta["tool_calls"] = [
                        {"index": i, **call} for i, call in enumerate(message["tool_calls"])
                    ]
                else:
                    delta["content"] = message["content"]

                def chunk(choice: dict[str, Any], **extra: Any) -> bytes:
                    payload = {
                        "id": "chatcmpl-fake",
                        "object": "chat.completion.chunk",
                        "created": created,
                        "model": "fake-model",
                        "choices": [choice],
                        **extra,
                    }
                    return f"data: {json.dumps(payload)}\n\n".encode()

                stream = (
                    chunk({"index": 0, "delta": delta, "finish_reason": None})
                    + chunk({"index": 0, "delta": {}, "finish_reason": finish}, usage=usage)
                    + b"data: [DONE]\n\n"
                )
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Content-Length", str(len(stream)))
                self.end_headers()
                self.wfile.write(stream)

        return Handler


def main(argv: list[str] | None = None) -> None:
    """``python -m tests.hosts.hermes.fake_llm --port 8766``: serve the scripted model until Ctrl-C
    (docs/hosts.md, "Hermes without a model key")."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8766)
    parser.add_argument("--tool", default="skill_view", help="the one tool the model calls")
    parser.add_argument("--args", default='{"name": "svc:payments"}', help="its JSON arguments")
    parser.add_argument("--say", default="(fake model) The tool answered:")
    parser.add_argument(
        "--also",
        action="append",
        default=[],
        metavar="JSON",
        help='another call in the same answer (parallel tool calls): {"tool": ..., "args": {...}}',
    )
    options = parser.parse_args(argv)
    more = [(str(c["tool"]), dict(c["args"])) for c in map(json.loads, options.also)]
    fake = FakeLLM(
        options.tool,
        json.loads(options.args),
        options.say,
        port=options.port,
        echo_tool=True,
        more_calls=more,
    )
    with fake:
        print(f"fake model at {fake.base_url} (model fake-model); Ctrl-C stops it", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()
