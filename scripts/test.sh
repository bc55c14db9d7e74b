#!/usr/bin/env bash
# The project's test command: lint, types, layer contracts, then the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
"$VENV/bin/ruff" check src tests
"$VENV/bin/mypy" --strict src/gpufleet
"$VENV/bin/lint-imports"
"$VENV/bin/python" -m pytest -p no:cacheprovider "$@"
