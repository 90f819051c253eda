#!/usr/bin/env bash
# Sets up (scripts/setup.sh), then runs the checks CI runs: the generated
# protocol code, ruff, mypy and the default pytest run (parallel workers; the slow
# tier, `pytest -m slow`, is left out: .ci/run runs it after this).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
ruff check .
mypy
pytest "$@"
