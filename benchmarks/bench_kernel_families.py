"""Register (explicit-SIMD) kernels against channel-vectorised kernels.

The fused no-grad feature chains of Dau1997, Osses2021, King2019 and Paulick2024 have two
numba CPU kernel families: register kernels (:mod:`lhotse_amt.kernels.casp_simd`,
``king2019_simd``, ``paulick_simd``, ``modbank_simd``: 8 channels per LLVM vector, inline
float32 ``pow``/``sqrt``, float32 models only) and channel-vectorised kernels
(:mod:`lhotse_amt.kernels.casp`, ``king2019``, ``paulick``, ``modbank``: loops over
channels that LLVM vectorises, float32 and float64). This script measures, for each
extractor, the CPU time of one extract with the register kernels, with the
channel-vectorised kernels (``LHOTSE_AMT_SIMD=0``) and in float64 (``dtype="float64"``, which
only the channel-vectorised kernels serve), each in its own process, 1 thread, best of
``--repeats``. The figures decide whether both families are kept (docs/performance.md).

    python benchmarks/bench_kernel_families.py
    python benchmarks/bench_kernel_families.py --seconds 5 -m amt-dau1997
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import _settings  # noqa: F401  (huge pages, host cache: before any tensor is made)

JOB = r"""
import json, sys, time
import numpy as np, torch
torch.set_num_threads(1)
import lhotse_amt  # registers the extractors
from lhotse.features.base import FEATURE_EXTRACTORS
cfg = json.loads(sys.argv[1])
cls = FEATURE_EXTRACTORS[cfg["name"]]
conf = cls.config_type()
if cfg["precise"]:
    conf.dtype = "float64"
ex = cls(conf)
sr = conf.sampling_rate
rng = np.random.default_rng(0)
x = (rng.standard_normal(int(cfg["seconds"] * sr)) * 10 ** ((65 - 100) / 20)).astype(np.float32)
ex.extract(x[: sr // 2], sr)  # compile / load the kernels
best = float("inf")
for _ in range(cfg["repeats"]):
    t = time.thread_time()
    ex.extract(x, sr)
    best = min(best, time.thread_time() - t)
print(json.dumps(dict(cpu=best / cfg["seconds"])))
"""

MODELS = ("amt-dau1997", "amt-osses2021", "amt-king2019", "amt-paulick2024")


def run(name: str, seconds: float, repeats: int, simd: bool, precise: bool) -> float:
    """CPU seconds per second of audio of one extract in a fresh process."""
    env = dict(os.environ, LHOTSE_AMT_SIMD="1" if simd else "0", OMP_NUM_THREADS="1")
    env["NUMBA_NUM_THREADS"] = "1"
    cfg = dict(name=name, seconds=seconds, repeats=repeats, precise=precise)
    out = subprocess.run(
        [sys.executable, "-c", JOB, json.dumps(cfg)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])["cpu"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-m", "--model", action="append", help="extractor name (repeatable)")
    parser.add_argument("--seconds", type=float, default=10.0, help="signal length")
    parser.add_argument("--repeats", type=int, default=5, help="best of this many extracts")
    args = parser.parse_args()
    print(f"CPU s per s of audio, 1 thread, {args.seconds:g} s of noise, best of {args.repeats}")
    print("| extractor | register (float32) | channel-vectorised (float32) | ratio | float64 |")
    print("|---|---|---|---|---|")
    for name in args.model or MODELS:
        reg = run(name, args.seconds, args.repeats, simd=True, precise=False)
        vec = run(name, args.seconds, args.repeats, simd=False, precise=False)
        f64 = run(name, args.seconds, args.repeats, simd=False, precise=True)
        print(f"| {name} | {reg:.4f} | {vec:.4f} | {vec / reg:.2f}x | {f64:.4f} |", flush=True)


if __name__ == "__main__":
    main()
