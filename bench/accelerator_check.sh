#!/usr/bin/env bash
# The checks CI (CPU only) cannot run: the golden-parity suites and the forward/training benchmark on an
# accelerator. Needs jax with the accelerator's plugin installed, and the reference files (../shared, or
# PNCNN_SHARED). Writes the pytest log and the benchmark section under OUTDIR. SUITES, WORKERS (pytest-xdist
# processes) and REPEATS (benchmark timings per row) override the defaults.
#
#   PNCNN_SHARED=/path/to/shared bench/accelerator_check.sh [OUTDIR] [PLATFORM]     (PLATFORM: cuda, tpu, rocm)
set -uo pipefail
out=$(realpath -m "${1:-accelerator_check}")
platform=${2:-cuda}
mkdir -p "$out"
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export JAX_PLATFORMS=$platform,cpu          # tests/conftest.py would otherwise pin the CPU
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # several test workers share one device
py=${PYTHON:-python3}

$py -c "import jax, flax; print('jax', jax.__version__, 'flax', flax.__version__, jax.devices())" | tee "$out/devices.txt"
suites=(${SUITES:-tests/nn/test_models_parity.py tests/nn/test_layers.py tests/nn/test_cpu_kernels.py tests/training/test_train_step_golden.py tests/test_losses.py})
# The parity suites on the accelerator (models default to float32 convolutions, so the official tolerances hold),
# then the benchmark (float32 and precision='default' rows).
$py -m pytest -q -n "${WORKERS:-8}" -p no:cacheprovider -rfE "${suites[@]}" 2>&1 | tee "$out/pytest.log"
$py bench/bench_forward.py --repeats "${REPEATS:-5}" --output "$out/BENCHMARKS.md" 2>&1 | tee "$out/bench.log"
