#!/usr/bin/env bash
# The GPU kit, on the device (issue 31): one device `run` call each, in the repo root, in the order prepare.sh prints.
#
#   bash benchmarks/gpu-kit/run.sh 1          # carry .device/calls/c01: install the transformers stage, measure that path
#   bash benchmarks/gpu-kit/run.sh 2, 3       # carry c02, c03: the real-model comparison's wheels; call 3 installs them,
#                                         # writes SmolLM2's folder and runs trl-ada-compare until its deadline
#   bash benchmarks/gpu-kit/run.sh N          # carry .device/calls/cNN: store a piece; on a tar's last piece reassemble,
#                                         # check sha256, install, `from vllm import LLM`, measure (group vllm-a)
#   bash benchmarks/gpu-kit/run.sh vllm-b     # carry nothing: more vLLM arms on the warm machine (also vllm-c)
#   bash benchmarks/gpu-kit/run.sh push       # carry nothing: the push check again on the warm machine (the vLLM core
#                                         # call runs it first, before group vllm-a)
#
# Results go to $OUT (the device tool brings them back): <stage>.json from measure.py, a log, the image's pip list and
# the requirement check of the carried wheels. Exit 3: the core of vLLM is installed but needs the extras (carry them,
# then run the vLLM groups again); exit 4: a piece is missing (the machine went cold: repeat the calls back to back).
#
# The dry run here (no GPU, Python 3.11): GPUKIT_LOCAL=1 GPUKIT_PYTHON=.venv/bin/python GPUKIT_DIR=/tmp/x OUT=/tmp/y
# bash benchmarks/gpu-kit/run.sh 1: pip installs the cp312 wheels with --python-version 3.12 into the target, and the
# local venv's Python runs against them (see benchmarks/gpu-kit/README.md).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
CALL=${1:?usage: run.sh CALL (a number from plan.json, or vllm-b, vllm-c)}
export GPUKIT_DIR=${GPUKIT_DIR:-/tmp/gpukit}
OUT=${OUT:-$GPUKIT_DIR/out}
PY=${GPUKIT_PYTHON:-python3}
LOCAL=${GPUKIT_LOCAL:-0}
mkdir -p "$OUT" "$GPUKIT_DIR"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 WANDB_MODE=disabled TOKENIZERS_PARALLELISM=false
# vLLM's sleep mode allocates through its own memory pool, which refuses torch's expandable segments.
case "${PYTORCH_CUDA_ALLOC_CONF:-}" in *expandable_segments*) echo "run.sh: unsetting PYTORCH_CUDA_ALLOC_CONF=$PYTORCH_CUDA_ALLOC_CONF (vLLM sleep mode)"; unset PYTORCH_CUDA_ALLOC_CONF ;; esac
START=$(date +%s)
LOG="$OUT/call-$CALL.log"
exec > >(tee -a "$LOG") 2>&1
echo "run.sh $CALL on $(hostname) at $(date -u +%FT%TZ); python: $($PY -c 'import sys; print(sys.version.split()[0], sys.executable)')"
if [ "$LOCAL" != 1 ]; then nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true; fi

site_on() {  # the carried packages first, then the repo, then the image
  export PYTHONPATH="$GPUKIT_DIR/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
  # .pth files of carried wheels (nvidia-cutlass-dsl's) only run in a site directory: have the image's site
  # directory hand them to site.addsitedir (the device is bare and given back after the session).
  if [ "$LOCAL" != 1 ] && ls "$GPUKIT_DIR"/site/*.pth >/dev/null 2>&1; then
    local sp; sp=$($PY -c 'import site; print(site.getsitepackages()[0])')
    echo "import site; site.addsitedir('$GPUKIT_DIR/site')" > "$sp/zz-gpukit.pth"
  fi
}

# A call has its plan's timeout_s (kit.py device-timeout); work stops 30 s before it, so that $OUT comes back whole.
# `push` (a rerun of the push check on a warm machine) is not a plan call: run it with timeout_s 240.
if [ "$CALL" = push ]; then TIMEOUT=240; else TIMEOUT=$($PY benchmarks/gpu-kit/kit.py device-timeout --name "$CALL") || exit 1; fi
remaining() { echo $(( TIMEOUT - 30 - ($(date +%s) - START) )); }
echo "run.sh: call $CALL has $TIMEOUT s (plan.json)"

measure_vllm() {  # $1: group name from plan.json's measure_calls
  local arms; arms=$($PY -c "import json,sys; print(' '.join(next(m['arms'] for m in json.load(open('benchmarks/gpu-kit/plan.json'))['measure_calls'] if m['name'] == sys.argv[1])))" "$1") || exit 1
  local size=1.5b; [ "$LOCAL" = 1 ] && size=toy
  mkdir -p "$GPUKIT_DIR/results"
  $PY benchmarks/gpu-kit/measure.py --stage vllm --size "$size" --arms $arms --deadline_s "$(remaining)" \
      --json "$OUT/$1.json" --base_json "$GPUKIT_DIR"/results/vllm-*.json ${GPUKIT_MEASURE_ARGS:-}
  local rc=$?
  cp "$OUT/$1.json" "$GPUKIT_DIR/results/" 2>/dev/null
  # every group so far as one table ($OUT is emptied before each call: the earlier groups' files come back with them)
  if ls "$GPUKIT_DIR"/results/vllm-*.json >/dev/null 2>&1; then
    $PY benchmarks/gpu-kit/measure.py --report "$GPUKIT_DIR"/results/vllm-*.json
    cp "$GPUKIT_DIR"/results/vllm-*.json "$OUT/" 2>/dev/null
  fi
  if grep -q "No module named" "$OUT/$1.json" 2>/dev/null; then
    echo "run.sh: an arm misses a module (see $OUT/$1.json): vLLM needs the extras; carry them (the calls after the core's)"
    exit 3
  fi
  return $rc
}

push_check() {  # both weight pushes into one CUDA engine, and which one AdaGRPOTrainer chose (push_check.py)
  local size=0.5b; [ "$LOCAL" = 1 ] && size=toy
  timeout "$(( $1 < $(remaining) ? $1 : $(remaining) ))" \
      $PY benchmarks/gpu-kit/push_check.py --size "$size" --json "$OUT/push-check.json"
}

case "$CALL" in
  push)
    [ -f "$GPUKIT_DIR/installed-core" ] || { echo "run.sh: vLLM is not installed on this machine (it went cold): repeat the core calls"; exit 4; }
    site_on
    push_check 200
    exit $?
    ;;
  vllm-*)
    [ -f "$GPUKIT_DIR/installed-core" ] || { echo "run.sh: vLLM is not installed on this machine (it went cold): repeat the core calls"; exit 4; }
    site_on
    measure_vllm "$CALL"
    exit $?
    ;;
esac

STAGE=$($PY benchmarks/gpu-kit/kit.py device-stage "$CALL") || exit 1
$PY benchmarks/gpu-kit/kit.py device "$CALL" || exit $?
case "$STAGE" in
  *-piece) echo "run.sh: call $CALL done in $(( $(date +%s) - START )) s"; exit 0 ;;
esac

if [ "$STAGE" = transformers ]; then
  $PY -m pip list --format=freeze > "$OUT/image_pip_list.txt" 2>/dev/null || true
fi
site_on
$PY benchmarks/gpu-kit/kit.py device-check --json "$OUT/requirements_check-$CALL.json"

if [ "$STAGE" = transformers ]; then
  $PY -c "import trl_ada, trl, datasets, math_verify, torch; print('imports ok: trl', trl.__version__, 'from', trl.__file__, 'datasets', datasets.__version__, 'torch', torch.__version__, 'cuda', torch.cuda.is_available())" || exit 1
  size=0.5b; [ "$LOCAL" = 1 ] && size=toy
  # TRL's GRPO n=4 (the ratios' base, in the same call) and the arms no committed session measured
  arms=$($PY benchmarks/gpu-kit/kit.py device-arms) || exit 1
  $PY benchmarks/gpu-kit/measure.py --stage transformers --size "$size" --deadline_s "$(remaining)" --arms $arms \
      --json "$OUT/transformers-$(date -u +%Y%m%dT%H%M).json" ${GPUKIT_MEASURE_ARGS:-}
  exit $?
fi

if [ "$STAGE" = compare-last ]; then
  # The real-model comparison. Runs committed by earlier sessions are copied in first (trl-ada-compare trains only
  # what is missing). The runs write under /tmp (checkpoints and run folders stay there); $OUT gets one tar of results/, eval_cache/
  # and the report, renewed every 15 s: the device brings back 8 files at most (the first session's ten runs and
  # their cache were more).
  MODEL="$GPUKIT_DIR/models/SmolLM2-135M-Instruct"
  CMP="$GPUKIT_DIR/compare"
  $PY -m trl_ada.examples.models smollm2 --output_dir "$MODEL" || exit 1
  mkdir -p "$CMP/results" "$CMP/eval_cache"
  if [ "$LOCAL" != 1 ]; then  # the dry run's toy design is another comparison
    cp benchmarks/gpu-kit/results/compare/results/*.json "$CMP/results/" 2>/dev/null || true
    cp benchmarks/gpu-kit/results/compare/eval_cache/*.json "$CMP/eval_cache/" 2>/dev/null || true
  fi
  pack_compare() {
    tar -cf "$OUT/compare.tar.tmp" -C "$CMP" results eval_cache $(cd "$CMP" && ls report.json compare.png 2>/dev/null) \
      && mv "$OUT/compare.tar.tmp" "$OUT/compare.tar"
  }
  ( while sleep 15; do pack_compare; done ) &
  PACKER=$!
  mapfile -t ARGS < <($PY benchmarks/gpu-kit/kit.py device-compare --model "$MODEL")
  if [ "$LOCAL" = 1 ]; then  # the dry run here: every arm, one seed, one step, short answers, on the CPU
    ARGS+=(--set use_cpu=true "model_name_or_path=$MODEL" max_completion_length=8 round_repeat=4 max_rounds=2
           --seeds 0 --max_steps 1 --eval_every 1 --eval_examples 4 --eval_k 0 --jobs 1)
  fi
  # the deadline leaves a minute for the runs it stops (their last evaluation) and the report
  $PY -m trl_ada.cli.compare "${ARGS[@]}" --deadline_s "$(( $(remaining) - 60 ))" --output_dir "$CMP" \
      ${GPUKIT_COMPARE_ARGS:-}
  rc=$?
  kill "$PACKER" 2>/dev/null
  pack_compare
  exit $rc
fi

# core-last or extras-last: vLLM is installed
if [ "$LOCAL" = 1 ]; then
  echo "run.sh: local dry run: vLLM (CUDA build, cp312) installed into $GPUKIT_DIR/site but not imported here"
  exit 0
fi
if ! $PY -c "from vllm import LLM; import vllm; print('imports ok: vllm', vllm.__version__)" 2> "$OUT/vllm_import_error.txt"; then
  cat "$OUT/vllm_import_error.txt"
  if grep -q "No module named" "$OUT/vllm_import_error.txt" && [ "$STAGE" = core-last ]; then
    echo "run.sh: vLLM's core misses a module: carry the extras (the calls after this one), back to back"
    exit 3
  fi
  exit 1
fi
# first: the weight push on CUDA (never run on a GPU before); the measurements get what is left of the call
push_check 200
measure_vllm vllm-a
