"""CPU cost of every extractor at one thread and at torch's default thread count, on an idle
machine and on one whose cores are busy with other processes.

A parallel region synchronises its threads at the end; when other processes occupy the
cores, a thread that the scheduler has put aside keeps the others waiting (and, with
spinning OpenMP workers, burning CPU) until it runs again. Code that opens many short
parallel regions per second of audio then costs far more CPU time at the default thread count
than at one thread (the loudness models' spectra through torch's matrix product: ~20x). This
script prints, per extractor, the process CPU time (all threads) per second of audio, best of
``--reps`` after a warm-up, for 1 thread and the default count (``torch.get_num_threads()`` at
start-up), idle and with ``--busy`` busy-loop processes running (default: one per core), and
the busy default / busy 1-thread ratio (about 1 when nothing oversubscribes).

    python benchmarks/bench_thread_contention.py [--seconds 4] [--reps 2] [--busy N] [-m NAME ...]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
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


def _spin() -> None:  # pragma: no cover - runs in the load processes
    while True:
        pass


def noise(seconds: float, sr: int, channels: int) -> np.ndarray:
    """Gaussian noise at 65 dB SPL (AMT convention: rms 1 = 100 dB SPL), float32."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((channels, int(seconds * sr))) * 10 ** ((65 - 100) / 20)
    return (x[0] if channels == 1 else x).astype(np.float32)


def cpu_per_audio_s(ex, x: np.ndarray, sr: int, seconds: float, reps: int, threads: int) -> float:
    """Best process CPU time per second of audio of ``ex.extract`` at ``threads`` threads."""
    torch.set_num_threads(threads)
    ex.extract(x, sr)  # warm-up at this thread count (numba compiles or loads its caches)
    best = float("inf")
    for _ in range(reps):
        t0 = time.process_time()
        ex.extract(x, sr)
        best = min(best, time.process_time() - t0)
    return best / seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", action="append", choices=NAMES)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--busy", type=int, default=os.cpu_count() or 1, help="busy-loop processes")
    args = ap.parse_args()
    default = torch.get_num_threads()
    names = args.model or NAMES
    cases = []
    for name in names:
        cls = FEATURE_EXTRACTORS[name]
        ex = cls(cls.config_type())
        sr = ex.config.sampling_rate
        cases.append((name, ex, sr, noise(args.seconds, sr, cls.input_channels)))

    def measure() -> dict[str, tuple[float, float]]:
        out = {}
        for name, ex, sr, x in cases:
            one = cpu_per_audio_s(ex, x, sr, args.seconds, args.reps, 1)
            many = cpu_per_audio_s(ex, x, sr, args.seconds, args.reps, default)
            out[name] = (one, many)
        torch.set_num_threads(default)
        return out

    idle = measure()
    ctx = mp.get_context("spawn")
    load = [ctx.Process(target=_spin, daemon=True) for _ in range(args.busy)]
    for p in load:
        p.start()
    try:
        time.sleep(0.5)
        busy = measure()
    finally:
        for p in load:
            p.terminate()
        for p in load:
            p.join()
    print(
        f"CPU-s per audio-s, best of {args.reps}, {args.seconds:g} s of noise at 65 dB SPL; "
        f"default = {default} threads, busy = {args.busy} busy-loop processes on "
        f"{os.cpu_count()} cores"
    )
    head = ("extractor", "idle 1 thr", f"idle {default} thr", "busy 1 thr", f"busy {default} thr")
    print(f"{head[0]:18s}" + "".join(f"{h:>13s}" for h in head[1:]) + f"{'busy ratio':>12s}")
    for name in names:
        (i1, id_), (b1, bd) = idle[name], busy[name]
        row = "".join(f"{v:13.4f}" for v in (i1, id_, b1, bd))
        print(f"{name:18s}{row}{bd / b1:12.2f}", flush=True)


if __name__ == "__main__":
    main()
