#!/usr/bin/env bash
# The GPU suite (issue 42): pncnn_jax against the PyTorch pNCNN on one GPU, within 8 minutes on a fresh machine,
# installation and compilation included. Writes OUTDIR/gpu_suite.json and OUTDIR/gpu_suite.md (one table; the rows
# and the method: bench/gpu_suite.py's docstring).
#
#   bench/gpu_suite.sh [OUTDIR] [--dry_run] [any option of bench/gpu_suite.py]
#
# What it installs: nothing that is already importable. If `pncnn_jax` does not import, `pip install -e .` from
# this checkout (with its dependencies; offline, e.g. a device machine with no registry, it falls back to running
# from the checkout through PYTHONPATH: the suite needs only jax, flax, optax and numpy of them). jax with its GPU
# plugin and torch are never installed by the suite: jax must see the GPU (else it stops, before any timing);
# without torch the torch columns say "not run".
# Caches: jax's persistent compilation cache in $GPU_SUITE_CACHE/jax and torch inductor's in
# $GPU_SUITE_CACHE/inductor (default ~/.cache/pncnn_gpu_suite): a rerun on the same machine skips the compiles.
# Budget: the engine starts no row later than DEADLINE_S after it starts (default: 400 s minus the install check)
# and stops a process 60 s after that, so the whole script ends within 8 minutes. PYTHON picks the interpreter
# (default python3).
set -uo pipefail
t0=$(date +%s)
out=accelerator_gpu_suite
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then out=$1; shift; fi
out=$(realpath -m "$out")
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
dry=0
for a in "$@"; do [ "$a" = "--dry_run" ] && dry=1; done
if ! command -v "$py" >/dev/null; then echo "error: PYTHON=$py not found" >&2; exit 2; fi
mkdir -p "$out" || { echo "error: cannot create OUTDIR $out" >&2; exit 2; }

export PYTHONUNBUFFERED=1
cache=${GPU_SUITE_CACHE:-$HOME/.cache/pncnn_gpu_suite}
export JAX_COMPILATION_CACHE_DIR=$cache/jax JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0
export JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES=0 TORCHINDUCTOR_CACHE_DIR=$cache/inductor
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # jax and torch run one after the other; no 75 % grab
if [ $dry = 1 ]; then
  export JAX_PLATFORMS=cpu
else
  unset JAX_PLATFORMS
fi

if ! $py -c "import pncnn_jax.nn.models, pncnn_jax.training.step" 2>/dev/null; then
  echo "pncnn_jax does not import: pip install -e . (from $PWD)"
  $py -m pip install -q -e . >"$out/pip.log" 2>&1 || echo "pip install failed (see $out/pip.log); running from the checkout"
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
  if ! $py -c "import pncnn_jax.nn.models, pncnn_jax.training.step"; then
    echo "error: pncnn_jax still does not import (needs jax, flax, optax, numpy)" >&2; exit 2
  fi
fi
if [ $dry = 0 ] && ! $py -c "import jax, sys; sys.exit(jax.default_backend() != 'gpu')"; then
  echo "error: jax sees no GPU ($($py -c 'import jax; print(jax.devices())' 2>&1 | tail -1)); install jax[cuda12] or jax[cuda13]" >&2
  exit 2
fi
$py -c "import torch" 2>/dev/null || echo "torch is not installed: the torch columns will say 'not run'"
# No row starts after the deadline; a process still running 60 s after it is stopped (its finished rows are kept),
# and the report takes seconds: deadline + 60 s + the install check above stays under 8 minutes.
left=$(( 400 - ($(date +%s) - t0) ))
[ "$left" -lt 60 ] && left=60
GPU_SUITE_ARGS="$out $*" $py bench/gpu_suite.py --out "$out" --deadline_s "${DEADLINE_S:-$left}" "$@" 2>&1 |
  tee "$out/gpu_suite.log"
rc=${PIPESTATUS[0]}
echo "gpu_suite.sh: $(( $(date +%s) - t0 )) s in all, exit status $rc; $out/gpu_suite.json, $out/gpu_suite.md"
exit "$rc"
