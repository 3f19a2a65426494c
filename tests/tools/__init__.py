"""Tests of the nine svc_* tools: prices, orders, hints and a property-based fuzz."""
