"""Real-time factor of the Osses2021 and King2019 models and extractors (CPU, one thread).

RTF = processing (CPU) time / audio duration at 16 kHz (the extractors' default) and
44.1 kHz (the rate of the speed target) for noise at 65 dB SPL (AMT
scale, rms 1 = 100 dB SPL), float32, one thread, for 1 s and 10 s, batch 1 and 8 (batch
RTF is per second of audio, i.e. time / (batch x duration)). Model forward = the full
model (Osses2021: list of modulation bands; King2019: phase-insensitive (B, T, F, M)
output); extractor = ``extract_batch`` of the registered ``amt-*`` extractor with its
default config at 44.1 kHz (10-ms frames, 2-s chunks): ``fused`` is the default
(fused pooled CPU kernel), ``stagewise`` the same extractor with the fused path off,
timed alternately in the same process (best of ``--reps``). Prints each row's peak resident
set size (high-water mark reset before the row, host cache released; ``_rss.py``).

    python benchmarks/bench_osses2021_king2019.py [--rates 16000 44100] [--durations 1 10]
        [--batches 1 8] [--reps 3] [--what forward fused stagewise]
        [--models osses2021 king2019]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch
from _rss import peak_rss_mb, reset_peak

from lhotse_amt.features import (
    King2019Config,
    King2019Extractor,
    Osses2021Config,
    Osses2021Extractor,
)
from lhotse_amt.models.king2019 import King2019
from lhotse_amt.models.osses2021 import Osses2021


def noise(seconds: float, batch: int, fs: int) -> torch.Tensor:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, int(seconds * fs))) * 10 ** ((65 - 100) / 20)
    return torch.tensor(x, dtype=torch.float32)


def timed(fn, reps: int = 1) -> tuple[float, float, float]:
    """Best CPU (process) time of ``reps`` runs after a warm-up (the machine may be
    shared: process time is not inflated by other processes' load), with its split into
    user and system (kernel) seconds. System time is mostly the operating system zeroing
    the fresh pages of large outputs (the model forward's sample-rate tensors); on this
    VM it is high the first time the process grows, which the warm-up absorbs."""
    fn()  # warm-up (numba compilation, caches, first growth of the process)
    best = user = system = float("inf")
    for _ in range(reps):
        t, o = time.process_time(), os.times()
        fn()
        d, o2 = time.process_time() - t, os.times()
        if d < best:
            best, user, system = d, o2.user - o.user, o2.system - o.system
    return best, user, system


def stagewise(ex):
    """The extractor with the fused CPU path switched off (stage-wise model + pooling)."""
    ex._fused_ok = lambda model, x: False
    return ex


def _models(fs: int) -> dict:
    return {
        "osses2021": (
            Osses2021(fs),
            Osses2021Extractor(Osses2021Config(sampling_rate=fs)),
            stagewise(Osses2021Extractor(Osses2021Config(sampling_rate=fs))),
        ),
        "king2019": (
            King2019(fs),
            King2019Extractor(King2019Config(sampling_rate=fs)),
            stagewise(King2019Extractor(King2019Config(sampling_rate=fs))),
        ),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rates", type=int, nargs="+", default=[16000, 44100])
    ap.add_argument("--durations", type=float, nargs="+", default=[1.0, 10.0])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--models", nargs="+", default=["osses2021", "king2019"])
    ap.add_argument(
        "--what", nargs="+", default=["fused", "stagewise"], help="forward fused stagewise"
    )
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"float32, torch threads={torch.get_num_threads()}, best of {args.reps}; target 0.05")
    print(
        f"{'model':<10} {'fs':>6} {'what':<9} {'dur':>5} {'batch':>5} {'RTF':>8} "
        f"{'(user':>7} {'sys)':>7} {'peak RSS MB':>12}"
    )
    for fs in args.rates:
        for name, (model, ex, ex_sw) in _models(fs).items():
            if name not in args.models:
                continue
            for dur in args.durations:
                for B in args.batches:
                    x = noise(dur, B, fs)
                    xs = list(x.numpy())
                    fns = {
                        "forward": lambda x=x, model=model: _forward(model, x),
                        "fused": lambda xs=xs, ex=ex, fs=fs: ex.extract_batch(xs, fs),
                        "stagewise": lambda xs=xs, ex=ex_sw, fs=fs: ex.extract_batch(xs, fs),
                    }
                    for what in args.what:
                        reset_peak()
                        cpu, user, system = (v / (dur * B) for v in timed(fns[what], args.reps))
                        print(
                            f"{name:<10} {fs:>6d} {what:<9} {dur:>5g} {B:>5d} {cpu:>8.4f} "
                            f"{user:>7.4f} {system:>7.4f} {peak_rss_mb():>12.0f}",
                            flush=True,
                        )


def _forward(model, x):
    with torch.inference_mode():
        model(x)


if __name__ == "__main__":
    main()
