"""The paid endpoint's parts: the request state machine, handlers, plan facts, HTTP glue.

:mod:`plugin.paid_endpoint` assembles them; hosts and tests import from there.
"""
