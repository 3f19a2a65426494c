"""SDK conformance: the official payments-py 1.18 SDK, unmodified, against the local sandbox.

Run: ``python -m pytest -q tests/conformance``. Findings (where the sandbox answered differently
from what the SDK expects) are listed with their tests in the project's conformance findings.
"""
