"""A loopback stand-in of LangSmith's ingest endpoint (LANGGRAPH.md §4), stdlib only, on a
thread of its own (the LangSmith client posts from its background thread, and ``flush()``
blocks): ``GET /info``, ``POST /runs/batch`` (JSON), ``POST /runs/multipart``, ``POST /runs``
and ``PATCH /runs/{id}``. Every run operation is kept and :meth:`LangSmithStub.runs` merges
them by run id (the name in the post, the final metadata and error in a later patch)."""

from __future__ import annotations

import gzip
import json
import threading
from email.parser import BytesParser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

INFO = {
    "version": "0.10.0",
    "batch_ingest_config": {
        "use_multipart_endpoint": False,
        "size_limit": 100,
        "size_limit_bytes": 20_971_520,
        "scale_up_qsize_trigger": 1000,
        "scale_up_nthreads_limit": 16,
        "scale_down_nempty_trigger": 4,
    },
}


class LangSmithStub:
    def __init__(self) -> None:
        self.ops: list[tuple[str, dict[str, Any]]] = []
        self.raw: list[bytes] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return None

            def _answer(self, status: int, data: Any) -> None:
                body = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self._answer(200, INFO)

            def _body(self) -> bytes:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    raw = gzip.decompress(raw)
                stub.raw.append(raw)
                return raw

            def do_POST(self) -> None:
                raw = self._body()
                if self.path.endswith("/runs/batch"):
                    data = json.loads(raw)
                    for op in ("post", "patch"):
                        stub.ops.extend((op, run) for run in data.get(op) or [])
                elif self.path.endswith("/runs/multipart"):
                    stub.multipart(self.headers.get("Content-Type", ""), raw)
                elif self.path.endswith("/runs"):
                    stub.ops.append(("post", json.loads(raw)))
                self._answer(200, {})

            def do_PATCH(self) -> None:
                run = json.loads(self._body())
                run["id"] = self.path.rstrip("/").rsplit("/", 1)[-1]
                stub.ops.append(("patch", run))
                self._answer(200, {})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def multipart(self, content_type: str, raw: bytes) -> None:
        message = BytesParser().parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + raw)
        parts: dict[str, dict[str, Any]] = {}
        for part in message.iter_parts():
            name = part.get_param("name", header="content-disposition") or ""
            op, _, rest = str(name).partition(".")
            run_id, _, field = rest.partition(".")
            payload = json.loads(part.get_payload(decode=True) or b"null")
            run = parts.setdefault(f"{op}.{run_id}", {"id": run_id})
            if field:
                run[field] = payload
            else:
                run.update(payload)
        self.ops.extend((key.partition(".")[0], run) for key, run in parts.items())

    def runs(self) -> dict[str, dict[str, Any]]:
        """Every run by id, its operations merged (``metadata`` lifted out of ``extra``)."""
        merged: dict[str, dict[str, Any]] = {}
        for _op, run in self.ops:
            into = merged.setdefault(str(run["id"]), {})
            for key, value in run.items():
                if value is not None:
                    into[key] = value
            metadata = (run.get("extra") or {}).get("metadata")
            if metadata:
                into.setdefault("metadata", {}).update(metadata)
        return merged

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
