"""Opening the gateway's approvals: the mode the host allows, and where mandates are kept."""

from __future__ import annotations

from ..config import ConfigError, PluginConfig
from ..redact import get_logger
from .gate import Approvals
from .ledger import LocalLedger, MandateLedger

log = get_logger("svc_gateway.approvals")

NO_COMMANDS = (
    "approval is 'human' but this host cannot deliver commands to the plugin, so nobody could "
    "type /svc_approve: running as approval 'model' (confirm: true buys). Set approval: model "
    "to silence this, or use a host that delivers commands."
)


def open_approvals(config: PluginConfig, *, delivers_commands: bool) -> Approvals:
    """``"human"`` where the host delivers commands (else ``"model"``, said at start); the
    mandates in this process, or in the shared Redis of ``stateUrl``."""
    human = config.approval == "human"
    if human and not delivers_commands:
        log.warning("%s", NO_COMMANDS)
        human = False
    ledger: MandateLedger = LocalLedger()
    if config.state_url and human:
        try:
            from .redis_ledger import RedisLedger
        except ImportError:
            raise ConfigError(
                "stateUrl needs the redis package: from a checkout, pip install -e '.[redis]'"
            ) from None
        ledger = RedisLedger(config.state_url)
        log.info("spending mandates are shared at %s", ledger.where)
    return Approvals(config, ledger, human=human)
