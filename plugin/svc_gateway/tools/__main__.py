"""``python -m svc_gateway.tools``: rewrite tools.json from the tool modules."""

from __future__ import annotations

from .catalogue import STORED, render

if __name__ == "__main__":  # pragma: no cover
    STORED.write_text(render(), encoding="utf-8")
    print(f"wrote {STORED}")
