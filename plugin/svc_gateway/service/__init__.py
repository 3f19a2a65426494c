"""The service client: talking to the service (client, transport, models, errors, prices)."""
