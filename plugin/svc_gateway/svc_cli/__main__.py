"""``python -m svc_gateway.svc_cli``: the same as the ``svc`` console script."""

from __future__ import annotations

from .main import main

raise SystemExit(main())
