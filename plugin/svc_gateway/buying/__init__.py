"""Buying from other agents (``svc_queryAgent``): the HTTP and MCP paths and the rules they share.

The paths: :mod:`.http` and :mod:`.mcp`, each reading an :class:`.request.AgentQuery`. Registered
endpoints only (:mod:`.purchase`), no private addresses (:mod:`.addresses`), one deadline and the
exact charge reported (:mod:`.charges`), tokens bound to the URL (:mod:`.tokens`), bounded answers
quoted as data (:mod:`.answers`). Nothing here imports ``tools/``: the tool declares the params.
"""
