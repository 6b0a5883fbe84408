#!/usr/bin/env bash
# Stage-numbered feature extraction for a Lhotse-prepared corpus.
#   stage 0: a small synthetic corpus (espeak-ng) when no --manifest-dir is given
#   stage 1: features of every split for every model (resumable)
# Usage: recipes/compute_features/run.sh [--stage N] [--stop-stage N]
#            [--manifest-dir DIR] [--output-dir DIR] [--nj N] [-- extra compute_features args]
set -euo pipefail
stage=0
stop_stage=1
manifest_dir=
output_dir=data/features
nj=2
models=(amt-dau1997 amt-glasberg2002)
while [[ $# -gt 0 ]]; do
  case $1 in
    --stage) stage=$2; shift 2 ;;
    --stop-stage) stop_stage=$2; shift 2 ;;
    --manifest-dir) manifest_dir=$2; shift 2 ;;
    --output-dir) output_dir=$2; shift 2 ;;
    --nj) nj=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "unknown option $1" >&2; exit 1 ;;
  esac
done
here=$(dirname "$0")

if [[ $stage -le 0 && $stop_stage -ge 0 && -z $manifest_dir ]]; then
  echo "stage 0: synthetic corpus in data/synth"
  python "$here/make_synthetic_corpus.py" --out-dir data/synth
fi
manifest_dir=${manifest_dir:-data/synth}

if [[ $stage -le 1 && $stop_stage -ge 1 ]]; then
  echo "stage 1: features (${models[*]}) for $manifest_dir -> $output_dir"
  args=()
  for m in "${models[@]}"; do args+=(--model "$m"); done
  python "$here/compute_features.py" --manifest-dir "$manifest_dir" \
    --output-dir "$output_dir" --num-jobs "$nj" "${args[@]}" "$@"
fi
