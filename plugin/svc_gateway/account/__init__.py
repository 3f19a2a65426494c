"""The account the plugin acts for: its config, its key and where that is kept, its clients.

Below ``tools/``, ``buying/``, ``selling/`` and ``chat/``: every one of them reaches the
service through the account (:class:`~svc_gateway.account.core.PluginCore`); the seller's
parts see only the narrow :class:`~svc_gateway.service.seller.Seller` it satisfies.
"""
