"""AstrBot 4.29 host: the svc plugin as an AstrBot plugin (a ``Star``) on the host contract.

* :mod:`.star` builds the ``Star`` class AstrBot instantiates (``make_star``): the nine tools,
  every command the plugin registers, the balance context in ``on_llm_request``, the caller of
  each call from AstrBot's event.
* :mod:`.metering` meters AstrBot's own tools (``meteredTools``) by wrapping its tool executor.
* :mod:`.install` places the two-file plugin folder (``svc/``) into an AstrBot data directory
  (``svc-gateway astrbot-install``).

Only :mod:`.star` and :mod:`.metering` import AstrBot (Python 3.12 and the ``astrbot`` extra);
this package, :mod:`.names` and :mod:`.install` import without it. The plugin folder's
``main.py`` is ``from svc_gateway.hosts.astrbot.star import make_star; Main = make_star(__name__)``.
"""
