"""Host adapters: each turns a chat gateway's plugin API into the host contract.

See :class:`svc_gateway.host.GatewayAPI`.
"""
