"""One seller replica in its own process: ``python -m tests.support.replica --state-url ...``.

It runs the reference gateway with the paid endpoint on 127.0.0.1 (a free port) sharing its
state through ``--state-url``, prints ``{"url": <bound endpoint>}`` when ready, appends one line
per handler run to ``--handler-log`` (so a test counts the work done across replicas), and on
SIGTERM closes the plugin (a last stats push) and prints ``{"stats": ...}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import threading
from dataclasses import asdict
from pathlib import Path
from typing import Any


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--service", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--plan", required=True)
    parser.add_argument("--agent", required=True)
    parser.add_argument("--state-url", required=True)
    parser.add_argument("--public-url", required=True)
    parser.add_argument("--config-dir", required=True)
    parser.add_argument("--handler-log", required=True)
    parser.add_argument("--handler-delay", type=float, default=0.0)
    parser.add_argument("--claim-ttl", type=float, default=0.0)
    parser.add_argument("--lease", type=float, default=0.0)
    parser.add_argument("--queue-retry", type=float, default=0.5)
    # the paid budget: a settle past it is deferred (answer now, receipt later)
    parser.add_argument("--paid-budget", type=float, default=2.0)
    args = parser.parse_args(argv)

    import svc_gateway
    from svc_gateway.account.credentials import CredentialStore
    from svc_gateway.hosts.reference import ReferenceGateway
    from svc_gateway.selling.handlers import default_handler

    log_fd = os.open(args.handler_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    async def handler(request: dict[str, Any]) -> Any:
        os.write(log_fd, f"{os.getpid()} {request['prompt']}\n".encode())
        if args.handler_delay:
            await asyncio.sleep(args.handler_delay)
        return await default_handler(request)

    gateway = ReferenceGateway(
        {
            "environment": "local",
            "baseUrl": args.service,
            "svcApiKey": args.key,
            "planId": args.plan,
            "agentId": args.agent,
            "enablePaidEndpoint": True,
            "paidEndpointPort": 0,
            "paidEndpointPublicUrl": args.public_url,
            "stateUrl": args.state_url,
            "paidBudgetSecs": args.paid_budget,
            "handlerTimeoutSecs": 5,
        }
    )
    gateway.agent_handler = handler  # type: ignore[attr-defined]
    store = CredentialStore(Path(args.config_dir), use_keyring=False)
    handle = svc_gateway.register(gateway, store=store)
    endpoint = handle.extras["paid_endpoint"]
    flow = endpoint.flow
    flow.settler.backoff = (0.0, 0.0)
    flow.settler.queue_retry_secs = args.queue_retry
    if args.claim_ttl:
        flow.book.claim_ttl_secs = args.claim_ttl
    if args.lease:
        flow.settler.queue.lease_secs = args.lease
    stopped = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stopped.set())
    sys.stdout.write(json.dumps({"url": endpoint.bound_url}) + "\n")
    sys.stdout.flush()
    stopped.wait()
    handle.close()
    stats = {k: v for k, v in asdict(flow.stats).items() if k != "receipts"}
    sys.stdout.write(json.dumps({"stats": stats}) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
