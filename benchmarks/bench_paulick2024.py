"""Real-time factor of the Paulick2024 model and the ``amt-paulick2024`` extractor (CPU,
one thread).

RTF = processing time / audio duration at 44.1 kHz (default configuration: 50 DRNL
channels, float32), per item of the batch: ``time / (batch * seconds)``, so batch 8 should
cost no more than batch 1. Input: noise with a 1/f-ish spectrum and 8-Hz envelope at
65 dB SPL (AMT scale, rms 1 = 100 dB SPL). Best of ``--reps`` runs (other processes on
the machine only make runs slower); wall-clock and process CPU time are both printed, and
the CPU time split into user and system (kernel) time: the system part is mostly the
operating system's cost of first touching freshly allocated memory (the model forward's
sample-rate output), which varies with the machine's memory state. Each row prints its own
peak resident set size (high-water mark reset before the row, host cache released;
``_rss.py``).

    python benchmarks/bench_paulick2024.py [--durations 1 10] [--batches 1 8] [--reps 2]
        [--what model extractor] [--channels 50] [--dtype float32]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch
from _rss import peak_rss_mb, reset_peak

from lhotse_amt.features import Paulick2024Config, Paulick2024Extractor
from lhotse_amt.models.paulick2024 import Paulick2024

FS = 44100


def signal(seconds: float, batch: int) -> np.ndarray:
    n = int(round(seconds * FS))
    rng = np.random.default_rng(0)
    spec = np.fft.rfft(rng.standard_normal((batch, n)), axis=-1)
    f = np.fft.rfftfreq(n, 1 / FS)
    spec /= np.sqrt(np.maximum(f, 50.0))
    x = np.fft.irfft(spec, n, axis=-1) * (1 + 0.5 * np.sin(2 * np.pi * 8 * np.arange(n) / FS))
    x *= 10 ** ((65 - 100) / 20) / np.sqrt(np.mean(x**2, axis=-1, keepdims=True))
    return x.astype(np.float32)


def timed(fn, reps: int) -> tuple[float, float, float, float]:
    """Best wall, CPU, user and system seconds of ``reps`` runs (CPU split of the best run)."""
    fn()  # warm-up (numba compilation from cache, allocator)
    wall = cpu = user = system = float("inf")
    for _ in range(reps):
        t, c, o = time.perf_counter(), time.process_time(), os.times()
        fn()
        w, d, o2 = time.perf_counter() - t, time.process_time() - c, os.times()
        wall = min(wall, w)
        if d < cpu:
            cpu, user, system = d, o2.user - o.user, o2.system - o.system
    return wall, cpu, user, system


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--durations", type=float, nargs="+", default=[1.0, 10.0])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--what", nargs="+", default=["model", "extractor"])
    ap.add_argument("--channels", type=int, default=50)
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    args = ap.parse_args()
    torch.set_num_threads(1)
    dtype = getattr(torch, args.dtype)
    model = Paulick2024(FS, n_channels=args.channels, dtype=dtype)
    ex = Paulick2024Extractor(Paulick2024Config(n_channels=args.channels, dtype=args.dtype))
    print(f"Paulick2024, fs={FS}, {args.channels} channels, {args.dtype}, 1 thread")
    head = ("what", "dur", "batch", "RTF wall", "RTF cpu", "(user", "sys)", "peak RSS MB")
    print("{:10s} {:>5s} {:>5s} {:>9s} {:>8s} {:>7s} {:>7s} {:>12s}".format(*head))
    for what in args.what:
        for seconds in args.durations:
            for batch in args.batches:
                x = signal(seconds, batch)
                if what == "model":
                    xt = torch.from_numpy(x).to(dtype)

                    def fn(xt=xt):
                        with torch.inference_mode():
                            model(xt)

                else:
                    xs = list(x)

                    def fn(xs=xs):
                        ex.extract_batch(xs, FS)

                reset_peak()
                wall, cpu, user, system = timed(fn, args.reps)
                n = batch * seconds
                print(
                    f"{what:10s} {seconds:5.1f} {batch:5d} {wall / n:9.4f} {cpu / n:8.4f} "
                    f"{user / n:7.4f} {system / n:7.4f} {peak_rss_mb():12.0f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
