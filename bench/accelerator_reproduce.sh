#!/usr/bin/env bash
# The reproduction's training on a lent accelerator machine, packed to come back to a CPU machine for evaluation.
#
#   bench/accelerator_reproduce.sh OUTDIR [SCALE] [JOBS] [DEADLINE_S] [ONLY]
#
# Trains `python -m pncnn_jax.experiments.reproduce --scale SCALE --jobs JOBS --stage train [--only ONLY]` in a scratch workdir
# for at most DEADLINE_S seconds (runs still training then are dropped: the machine keeps nothing), then packs every
# finished run folder without its checkpoints (final_weights.{npz,json}, metrics.jsonl, config.json, device.json,
# wall_time.json, train.log) into OUTDIR/runs_<k>.tar, a few runs per file. On the CPU machine:
#   mkdir -p WORKDIR/runs && for t in OUTDIR/runs_*.tar; do tar -xf $t -C WORKDIR/runs; done
#   python -m pncnn_jax.experiments.reproduce --workdir WORKDIR --scale SCALE --ship pncnn_jax/pretrained/synthetic
set -uo pipefail
out=$(realpath -m "${1:?usage: $0 OUTDIR [SCALE] [JOBS] [DEADLINE_S] [ONLY]}")
scale=${2:-long}  # a key of pncnn_jax.experiments.runs.SCALES
jobs=${3:-4}
deadline=${4:-480}
only=${5:-}
mkdir -p "$out"
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
wd=${WORKDIR:-/tmp/pncnn_reproduce_$scale}
t0=$(date +%s)
timeout -s INT "$deadline" $py -m pncnn_jax.experiments.reproduce --workdir "$wd" --scale "$scale" --jobs "$jobs" --stage train \
  ${only:+--only "$only"} 2>&1 | tee "$out/reproduce.log"
pkill -INT -f "pncnn_jax.experiments.reproduce --workdir $wd" 2>/dev/null; sleep 2
pkill -KILL -f "pncnn_jax.experiments.reproduce --workdir $wd" 2>/dev/null
echo "training stage: $(( $(date +%s) - t0 )) s" | tee -a "$out/reproduce.log"
# Pack the finished runs (those with final weights), about 12 MB per tar file.
cd "$wd/runs" || exit 1
k=0; size=0; files=()
for run in */; do
  run=${run%/}
  [ -f "$run/final_weights.npz" ] || { echo "not finished: $run" | tee -a "$out/reproduce.log"; continue; }
  files+=("$run/final_weights.npz" "$run/final_weights.json")
  for f in metrics.jsonl config.json device.json wall_time.json train.log; do [ -f "$run/$f" ] && files+=("$run/$f"); done
  size=$(( size + $(stat -c %s "$run/final_weights.npz") ))
  if [ "$size" -gt 12000000 ]; then tar -cf "$out/runs_$k.tar" "${files[@]}"; k=$((k + 1)); size=0; files=(); fi
done
[ "${#files[@]}" -gt 0 ] && tar -cf "$out/runs_$k.tar" "${files[@]}"
ls -la "$out"
