#!/usr/bin/env bash
# Mutation testing of the money-moving modules with mutmut 3 (the `mutation` extra).
#
#   scripts/mutation.sh            # mutate, test, print the score per module
#   scripts/mutation.sh --fresh    # forget cached results first
#   MUTATION_JOBS=2 scripts/mutation.sh
#
# mutmut 3 imports the mutated code from ./src or ./, but our package lives in plugin/. So this
# script stages a copy of the tree as build/mutation/{src/svc_gateway,tests,pyproject.toml} and
# runs mutmut there ([tool.mutmut] in pyproject.toml names paths inside that staging tree).
# For each mutant mutmut runs only the tests that called the mutated function. Results:
# build/mutation/mutation-report.md (score per module and every surviving mutant).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
STAGE="${MUTATION_DIR:-$ROOT/build/mutation}"
JOBS="${MUTATION_JOBS:-$(nproc)}"

if [[ "${1:-}" == "--fresh" ]]; then
    rm -rf "$STAGE"
    shift
fi
mkdir -p "$STAGE/src"
# Refresh the staged copy; mutmut notices changed sources itself and re-tests only those mutants.
# (cp -a keeps modification times, which is how mutmut tells an unchanged file.)
rm -rf "$STAGE/src/svc_gateway" "$STAGE/tests"
cp -a "$ROOT/plugin/svc_gateway" "$STAGE/src/svc_gateway"
cp -a "$ROOT/tests" "$STAGE/tests"
find "$STAGE/src" "$STAGE/tests" -name __pycache__ -prune -exec rm -rf {} +
cp "$ROOT/pyproject.toml" "$ROOT/manifest.json" "$ROOT/README.md" "$STAGE/"
# mutmut copies src/, tests/ and pyproject.toml again into mutants/; drop stale test copies.
rm -rf "$STAGE/mutants/tests"

cd "$STAGE"
# Only the staged (mutated) package may be importable: not the editable install's plugin/, not
# a worktree on PYTHONPATH. mutmut puts mutants/src first on sys.path; tests import `tests.*`
# from mutants/.
unset PYTHONPATH
export PYTHONDONTWRITEBYTECODE=1
started=$(date +%s)
status=0
mutmut run --max-children "$JOBS" "$@" || status=$?
finished=$(date +%s)
echo "mutmut run: exit $status, $((finished - started)) s wall with $JOBS workers"
python "$ROOT/scripts/mutation_report.py" --mutants "$STAGE/mutants" \
    --seconds "$((finished - started))" --out "$STAGE/mutation-report.md"
exit "$status"
