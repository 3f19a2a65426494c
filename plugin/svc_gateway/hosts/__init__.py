"""Host adapters: each turns a chat gateway's plugin API into :class:`svc_gateway.host.GatewayAPI`."""
