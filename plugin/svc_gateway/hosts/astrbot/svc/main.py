"""The svc plugin's AstrBot entry: AstrBot loads this file as ``data.plugins.<dir>.main``.

AstrBot finds plugins only as folders under its data directory and binds only the handlers defined
in the plugin's own module, so the adapter builds its ``Star`` class under this module's name.
Place this folder with ``svc-gateway astrbot-install --data <AstrBot data directory>``.
"""

from svc_gateway.hosts.astrbot.star import make_star

Main = make_star(__name__)
