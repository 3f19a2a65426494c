#!/usr/bin/env bash
# Mutation testing of the money-moving modules (mutmut 3; see scripts/mutation.py for options).
#   scripts/mutation.sh [--group selling|sandbox|tools|client]... [--fresh] [--jobs N] [--report]
set -euo pipefail
cd "$(dirname "$0")/.."
exec python scripts/mutation.py "$@"
