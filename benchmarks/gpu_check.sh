#!/usr/bin/env bash
# Everything synattn measures and tests on CUDA, on one card, in at most 9 minutes and a half:
#   1. the cuda tests (tests/test_cuda.py: every structure and attention feature against the CPU
#      in float64, a few training steps of every config)              at most 115 s
#   1b. the Triton kernels compiled on the card (tests/structs/test_triton_*.py, the registry's
#      triton cases) and the Matrix-Tree GPU path                     at most 90 s
#   2. bench_structs.py --device cuda --quick (the sizes of docs/structs.md)   120 s
#   2b. bench_matrix_tree_device.py --device cuda (the robust kernel gated on the device
#      against one read back)                                          30 s
#   3. bench_attention.py --device cuda --quick --lengths 64               65 s
#   4. bench_train.py --device cuda --make-data 300 --steps 5              110 s
#   5. bench_hf.py --device cuda --batch 32 --length 128                   40 s
# Each part runs under its own time limit (a part cut off keeps what it printed), writes its output
# to OUT/<part>.txt, and the script ends with a summary: the card, the date, each part's status and
# time, and the tables. Run from anywhere, after scripts/setup.sh (the peers of bench_structs, if
# wanted: pip install --no-deps torch-struct==0.5 supar==1.1.4 nltk dill):
#   bash benchmarks/gpu_check.sh [OUT]       # OUT defaults to outputs/gpu_check/<UTC time>
# Exit status: 0 when every part finished with status 0, 1 otherwise, 2 without a CUDA GPU.
set -uo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-.venv/bin/python}
out=${1:-outputs/gpu_check/$(date -u +%Y%m%d-%H%M%S)}
if ! "$py" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "gpu_check: $py: torch sees no CUDA GPU (torch.cuda.is_available() is False)" >&2
  exit 2
fi
mkdir -p "$out"
: > "$out/status.txt"
failed=0

part() {  # part NAME SECONDS COMMAND...: run with a time limit, output to OUT/NAME.txt
  local name=$1 limit=$2 start rc
  shift 2
  echo "gpu_check: $name (at most ${limit} s) ..." >&2
  start=$(date +%s)
  timeout --signal=INT --kill-after=10 "$limit" "$@" > "$out/$name.txt" 2>&1
  rc=$?
  [ "$rc" -eq 0 ] || failed=1
  local note=""
  [ "$rc" -eq 124 ] && note=" (cut off at ${limit} s)"
  printf '%-10s status %3d  %4d s%s\n' "$name" "$rc" "$(( $(date +%s) - start ))" "$note" >> "$out/status.txt"
}

part tests 115 "$py" -m pytest -q -m cuda -p no:cacheprovider tests/test_cuda.py
part triton 90 "$py" -m pytest -q -p no:cacheprovider tests/structs/test_triton_eisner.py \
  tests/structs/test_triton_chain.py tests/structs/test_triton_cky.py tests/structs/test_matrix_tree_device.py \
  tests/structs/test_triton_matrix_tree.py \
  tests/structs/test_registry.py -k "triton or device or Triton or cuda"
part structs 120 "$py" benchmarks/bench_structs.py --device cuda --quick
part mtdevice 30 "$py" benchmarks/bench_matrix_tree_device.py --device cuda --rounds 10
part attention 65 "$py" benchmarks/bench_attention.py --device cuda --quick --lengths 64
part train 110 "$py" benchmarks/bench_train.py --device cuda --make-data 300 --steps 5 --warmup 2
part hf 40 "$py" benchmarks/bench_hf.py --device cuda --batch 32 --length 128 --repeats 5

{
  echo "# synattn gpu_check, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
  "$py" -c "import torch; p = torch.cuda.get_device_properties(0); print(f'# {p.name}, {p.total_memory / 2**30:.0f} GiB, torch {torch.__version__}, CUDA {torch.version.cuda}')"
  echo
  cat "$out/status.txt"
  echo
  echo "## tests";     tail -n 3 "$out/tests.txt"
  echo "## triton";    tail -n 3 "$out/triton.txt"
  echo "## structs (ms; speed-up = faster peer / synattn)"
  grep -E '^(case|Eisner|Matrix-Tree|CKY|chain|# peak)' "$out/structs.txt"
  echo "## Matrix-Tree device path (ms; ratio = read back / gated)"
  sed -n '/^case/,$p' "$out/mtdevice.txt"
  echo "## attention (forward+backward of one layer)"
  sed -n '/^variant/,/^$/p' "$out/attention.txt"
  echo "## train (one update, vs the baseline config)"
  sed -n '/^config/,/^$/p' "$out/train.txt"
  echo "## hf (BERT-base-sized layer, vs sdpa)"
  sed -n '/^variant/,$p' "$out/hf.txt"
} | tee "$out/summary.txt"
echo "gpu_check: outputs in $out" >&2
exit $failed
