"""Host adapters: each turns a chat gateway's plugin API into :class:`plugin.host.GatewayAPI`."""
