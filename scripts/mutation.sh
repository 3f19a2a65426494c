#!/usr/bin/env bash
# Mutation testing of the money-moving modules (mutmut 3; see scripts/mutation.py for options).
#   scripts/mutation.sh [--group selling|sandbox|tools|client]... [--fresh] [--jobs N] [--report]
set -euo pipefail
cd "$(dirname "$0")/.."
# the interpreter the project was installed with: $PYTHON, the active venv, the checkout's .venv,
# else python3 (Debian has no bare `python`)
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -n "${VIRTUAL_ENV:-}" && -x "$VIRTUAL_ENV/bin/python" ]]; then
        PYTHON="$VIRTUAL_ENV/bin/python"
    elif [[ -x .venv/bin/python ]]; then
        PYTHON=.venv/bin/python
    else
        PYTHON=python3
    fi
fi
exec "$PYTHON" scripts/mutation.py "$@"
