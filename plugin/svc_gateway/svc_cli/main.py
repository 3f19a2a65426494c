"""The ``svc`` root group and :func:`main`, which turns every outcome into an exit code.

Exit codes: 0 success; 1 the service refused (or could not be reached); 2 bad usage, refused
before anything was sent. A failure is told on stderr in a line or two, never as a traceback.
"""

from __future__ import annotations

import sys

import click

from .. import __version__
from ..service.errors import ServiceError
from . import errors
from .agents import agents
from .config_cmd import config, login, logout
from .delegation import delegation
from .facilitator import facilitator
from .helpers import HELPERS
from .options import global_options
from .organizations import organizations
from .output import MaskedStderr
from .pay import pay_command
from .plans import plans
from .x402token import x402token

EPILOG = (
    "Environment: SVC_API_KEY and SVC_ENVIRONMENT override the profile; SVC_PROFILE picks "
    "it; SVC_<ENV>_BASE_URL gives an environment's URL. Exit codes: 0 success, 1 the service "
    "refused, 2 bad usage (nothing sent)."
)


@click.group(
    name="svc",
    epilog=EPILOG,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, "--version", prog_name="svc", message="%(prog)s %(version)s")
@global_options
def cli() -> None:
    """Command-line client of the Agent Payments Service: plans, agents, tokens, settlement."""


for _helper in HELPERS:
    plans.add_command(_helper)
for _group in (plans, agents, x402token, facilitator, delegation, organizations, config):
    cli.add_command(_group)
cli.add_command(login)
cli.add_command(pay_command)
cli.add_command(logout)


def main(argv: list[str] | None = None) -> int:
    """Run ``svc``; returns the exit code (the console script exits with it)."""
    try:
        result = cli.main(
            args=argv, prog_name="svc", complete_var="_SVC_COMPLETE", standalone_mode=False
        )
    except click.UsageError as error:  # bad flags, bad values, local refusals
        error.show(file=MaskedStderr())  # type: ignore[arg-type]  # a writer is all it needs
        return errors.EXIT_USAGE
    except click.ClickException as error:
        error.show(file=MaskedStderr())  # type: ignore[arg-type]
        return error.exit_code
    except ServiceError as error:
        return errors.report_service_error(error)
    except (click.Abort, KeyboardInterrupt):
        click.echo("Aborted.", err=True)
        return errors.EXIT_INTERRUPTED
    except BrokenPipeError:
        sys.stderr.close()  # the reader went away (svc ... | head): nothing more to say
        return errors.EXIT_REFUSED
    except Exception as error:
        return errors.report_unexpected(error)
    return result if isinstance(result, int) else errors.EXIT_OK
