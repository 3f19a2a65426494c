"""Buying from other agents (``svc_queryAgent``): the HTTP and MCP paths and the rules they share.

Registered endpoints only (:mod:`.purchase`), no private addresses (:mod:`.addresses`), one deadline
and the exact charge reported (:mod:`.charges`), bounded answers quoted as data (:mod:`.answers`).
"""
