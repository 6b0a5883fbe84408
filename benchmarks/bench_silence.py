"""Cost of digital silence: every extractor on noise and on the same noise followed by exact
zeros (CPU, one thread).

Digital silence after a sound drives the recursive filters' states into subnormal numbers
(and a decaying state can stay on the smallest one for ever); x86 CPUs take a ~100-cycle
microcode assist for every subnormal operand, so without care a second of silence costs
5-10 times a second of sound. The kernels treat subnormals as zero (see
:func:`lhotse_amt.kernels.fastmath.denormals_off`); this script prints, per extractor, the
real-time factor (extraction time / audio duration, best of ``--reps``) on ``--seconds`` of
noise at 65 dB SPL and on 1 s of that noise followed by zeros, and their ratio (about 1
when silence is handled; the ratio, not the absolute figures, is the point, since other load
on the machine changes both).

    python benchmarks/bench_silence.py [--seconds 6] [--reps 2] [-m amt-dau1997 ...]
"""

from __future__ import annotations

import argparse
import time

import _settings  # noqa: F401  (huge pages, host cache: before any tensor is made)
import numpy as np
import torch
from lhotse.features.base import FEATURE_EXTRACTORS

import lhotse_amt  # noqa: F401  (registers the extractors)

NAMES = (
    "amt-dau1997",
    "amt-osses2021",
    "amt-king2019",
    "amt-paulick2024",
    "amt-glasberg2002",
    "amt-moore2016",
)


def noise(seconds: float, sr: int, channels: int, pascal: bool) -> np.ndarray:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((channels, int(seconds * sr)))
    # 65 dB SPL: rms 20 uPa * 10^(65/20) for the loudness models (pascals), else the AMT
    # convention (rms 1 = 100 dB SPL)
    x *= 20e-6 * 10 ** (65 / 20) if pascal else 10 ** ((65 - 100) / 20)
    return (x[0] if channels == 1 else x).astype(np.float32)


def best(fn, reps: int) -> float:
    fn()  # warm-up: kernels compiled or loaded from the cache
    t = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        t = min(t, time.perf_counter() - t0)
    return t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", action="append", choices=NAMES)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"{'extractor':18s} {'RTF noise':>10s} {'RTF 1 s + silence':>18s} {'ratio':>6s}")
    for name in args.model or NAMES:
        cls = FEATURE_EXTRACTORS[name]
        ex = cls(cls.config_type())
        sr = ex.config.sampling_rate
        pascal = "glasberg" in name or "moore" in name
        x = noise(args.seconds, sr, cls.input_channels, pascal)
        xs = x.copy()
        xs[..., sr:] = 0.0
        a = best(lambda x=x, ex=ex, sr=sr: ex.extract(x, sr), args.reps) / args.seconds
        b = best(lambda x=xs, ex=ex, sr=sr: ex.extract(x, sr), args.reps) / args.seconds
        print(f"{name:18s} {a:10.3f} {b:18.3f} {b / a:6.2f}", flush=True)


if __name__ == "__main__":
    main()
