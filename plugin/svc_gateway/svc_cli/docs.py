"""``docs/cli.md``, generated from the commands' own help: ``python -m svc_gateway.svc_cli.docs``.

A test regenerates the page and compares, so the page never drifts from ``svc --help``.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Iterator

import click

from .main import cli

INTRO = """\
# The `svc` command-line client

`svc` is the command-line client of the Agent Payments Service: every operation of SPEC.md's
client table (plans, agents, access tokens, verify and settle), plus delegations,
organizations and profiles. It is installed with the plugin, beside `svc-gateway`.

This page is generated from the commands' help (`python -m svc_gateway.svc_cli.docs >
docs/cli.md`); `svc <group> <command> --help` prints the same text.

## Try it offline

The package's local sandbox (`svc-gateway sandbox`, [The sandbox](sandbox.md)) stands in for
the service. Start it in one terminal:

```bash
svc-gateway sandbox --port 8765 --db sandbox.db
```

Then, in another, one step makes two profiles on it, `builder` and `subscriber`, each with a
new sandbox account, and the whole paid cycle runs offline (bash, and python3 to read JSON;
`tests/svc_cli/test_docs_cli.py` runs this block as written):

```bash
SANDBOX=${SANDBOX:-http://127.0.0.1:8765}
json() { python3 -c "import json, sys; print(json.load(sys.stdin)$1)"; }
svc config init --from-sandbox "$SANDBOX"
ME=$(svc --profile builder config show --format json | json '["account"]')
svc plans get-fixed-credits-config --credits-granted 100 > credits.json
svc plans get-erc20-price-config --amount '$1.00' --receiver "$ME" \\
    --token-address 0x036CbD53842c5426634e7929541eC2318f3dCF7e > price.json
PLAN=$(svc --profile builder plans register-credits-plan --plan-metadata '{"name": "Starter"}' \\
    --price-config price.json --credits-config credits.json --format json | json '["planId"]')
AGENT=$(svc --profile builder agents register-agent --agent-metadata '{"name": "Echo"}' \\
    --agent-api '{"endpoints": [{"POST": "http://127.0.0.1:8080/ask"}]}' \\
    --payment-plans "$PLAN" --format json | json '["data"]["agentId"]')
svc --profile subscriber plans order-plan "$PLAN"
TOKEN=$(svc --profile subscriber x402token get-x402-access-token "$PLAN" --agent-id "$AGENT" \\
    --format json | json '["accessToken"]')
REQUEST=$(svc --profile builder facilitator verify-permissions --token "$TOKEN" --plan "$PLAN" \\
    --format json | json '["agentRequest"]["agentRequestId"]')
svc --profile builder facilitator settle-permissions --token "$TOKEN" --plan "$PLAN" \\
    --agent-request-id "$REQUEST"
svc --profile subscriber plans get-plan-balance "$PLAN"    # 99 of the 100 credits left
```

Verify and settle build the `paymentRequired` envelope from the token (the scheme, network,
agent, URL and verb it was issued for) and your `--plan`; `--params params.json` (an envelope
from `svc x402token build-payment-required`, `x402AccessToken`, `maxAmount`) still works.

## Profiles and keys

A profile names an environment (`sandbox`, `live` or `local`), its REST root (`base-url`,
ending in `/api/v1`), an optional API version and one API key:

```console
$ svc --profile builder config init --api-key - --environment sandbox \\
      --base-url https://<sandbox host>/api/v1 < builder.key
$ svc --profile subscriber login -        # reads <env>:<API_KEY> from stdin
$ svc config show                         # the key is only ever shown masked
```

`svc login` (and `config init --api-key`) checks the key with the service before storing it: a
key the service refuses is not stored (exit 1); when the service cannot be reached (or no URL
is known yet) the key is stored and the command says plainly that it was not checked.

Settings live in `config.json` under `$SVC_CONFIG_DIR` (else `$XDG_CONFIG_HOME/svc`, else
`~/.config/svc`); keys are never written there but kept like the plugin keeps its own: in the
OS keyring when a secure one exists, else in an owner-only (0600) file of the profile.
`SVC_API_KEY` and `SVC_ENVIRONMENT` override the profile, `SVC_PROFILE` picks one, and
`SVC_<ENV>_BASE_URL` gives an environment's URL. A key is only ever sent to its own
environment's URL: a mismatch is refused before anything is sent.

## Output and exit codes

- `--format table` (the default for service calls) prints a readable table; `--format json`
  prints the service's JSON and nothing else on stdout (notes go to stderr). The plan helpers
  (`get-*-config`, `set-*`, `build-payment-required`) print JSON unless `--format table` is
  given, so the output of one is the input of the next, unedited.
- Exit codes: `0` success; `1` the service refused (its error code and message on stderr,
  stdout empty) or could not be reached; `2` bad usage, refused locally naming the flag,
  nothing sent. Never a traceback.
- JSON inputs (`--plan-metadata`, `--price-config`, `--params`...) take a file, `-` for stdin,
  or the JSON text itself.
- Shell completion: `eval "$(_SVC_COMPLETE=bash_source svc)"` (also `zsh_source`,
  `fish_source`).

## Pay a URL in one command

`svc pay` does the buyer's side of a paid request at once: it POSTs to the URL, reads its 402,
checks it as the chat plugin's `svc_queryAgent` does (plain HTTP only to this machine, no
private addresses, the URL must be one of the agent's registered `POST` endpoints, the plan
must be one the agent sells), shows the price and asks, orders the plan when your balance is
short, pays with a single-use token bound to the URL, and prints the answer and the checked
receipt:

```console
$ svc --profile subscriber pay http://127.0.0.1:8080/runs/wait \\
      --data '{"question": "how far is the moon"}'
Pay agent <agent> at http://127.0.0.1:8080/runs/wait up to 2 credits of plan 'Ask', buying
the plan first for 1 USDC (100 credits; you hold 0 credits).
Pay 1.00 USD? [y/N]: y
{
  "answer": "You asked 5 words."
}

Paid 2 credits of plan <plan> to agent <agent>; balance 98 credits; transaction 0x...
```

- The plan and the agent come from the 402 (`--plan` and `--agent-id` choose or override);
  when the 402 names no agent (a route configured without `agent_id`, as in
  [app.py](selling.md#sell-routes-of-your-own-aiohttp-app)), the agent selling the plan that
  registered the URL is found in the service's record.
- `--yes` pays without asking (the price is still shown); `--max-price '$0.50'` (or `'0.5
  USDC'`) pays without asking when it costs at most that and refuses above it. Without either,
  a "no" (or no answer on stdin) pays nothing.
- `--format json` prints one JSON document (`answer`, `receipt`, `planId`, `agentId`,
  `ordered`, `balanceAfter`, `idempotencyKey`, `warnings`) for scripts.
- `--print-header` prints `payment-signature: <token>` instead of sending, for
  `curl -H "$(svc pay URL --print-header --yes)" ...`; the token pays once, for that URL.
- `--idempotency-key KEY` is sent as `Idempotency-Key` (default: a random one). A timeout or a
  dropped connection is sent again with the same token and key, at most 3 times in all, within
  the one `--timeout` (default 60 s): a seller that already answered replays its answer
  without charging again.
"""


def walk(
    command: click.Command, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    yield path, command
    if isinstance(command, click.Group):
        for name in sorted(command.commands):
            yield from walk(command.commands[name], (*path, name))


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


#: Shown once, on ``svc`` itself: every command accepts them.
GLOBAL = frozenset({"profile", "format", "api_version"})


def option_rows(command: click.Command, ctx: click.Context, *, root: bool) -> list[str]:
    rows = []
    help_option = command.get_help_option(ctx)
    for param in command.get_params(ctx):
        if not isinstance(param, click.Option) or param.hidden:
            continue
        if not root and (param.name in GLOBAL or param is help_option):
            continue
        record = param.get_help_record(ctx)
        if record is None:
            continue
        flags, text = record
        rows.append(f"| `{_cell(flags)}` | {_cell(text)} |")
    return rows


def section(path: tuple[str, ...], command: click.Command) -> str:
    name = " ".join(("svc", *path))
    parent = cli.make_context("svc", [], resilient_parsing=True)
    ctx = click.Context(command, info_name=name, parent=parent)
    level = "#" * min(2 + len(path), 4)
    usage = " ".join(command.collect_usage_pieces(ctx))
    lines = [f"{level} `{name}`", "", inspect.cleandoc(command.help or ""), ""]
    lines += [f"Usage: `{name} {usage}`", ""]
    if path:
        lines += ["Also takes the global options `--profile`, `--format`, `--api-version`.", ""]
    rows = option_rows(command, ctx, root=not path)
    if rows:
        lines += ["| Option | Meaning |", "|---|---|", *rows, ""]
    if isinstance(command, click.Group):
        lines += ["| Command | What it does |", "|---|---|"]
        for sub in sorted(command.commands):
            short = command.commands[sub].get_short_help_str(limit=200)
            lines.append(f"| `{sub}` | {_cell(short)} |")
        lines.append("")
    return "\n".join(lines)


def render() -> str:
    parts = [INTRO]
    parts += [section(path, command) for path, command in walk(cli)]
    return "\n".join(parts).rstrip() + "\n"


if __name__ == "__main__":  # pragma: no cover
    sys.stdout.write(render())
