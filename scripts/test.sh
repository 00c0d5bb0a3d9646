#!/usr/bin/env bash
# Runs the whole test suite in a project-local virtualenv (created on first use).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/pip install --quiet --disable-pip-version-check -e '.[dev]'
exec .venv/bin/python -m pytest "$@"
