"""The ways in to the paid flow: endpoint, route middleware, MCP and metered host tools."""
