"""Real-time factor of the Osses2021 and King2019 models and extractors (CPU, one thread).

RTF = processing time / audio duration at 44.1 kHz for noise at 65 dB SPL (AMT scale,
rms 1 = 100 dB SPL), float32, for 1 s and 10 s, batch 1 and 8 (batch RTF is per second
of audio, i.e. time / (batch x duration)). Model forward = the full model (Osses2021:
list of modulation bands; King2019: phase-insensitive (B, T, F, M) output); extractor =
``extract_batch`` of the registered ``amt-*`` extractor with its default config at 44.1 kHz
(10-ms frames, 2-s chunks). Prints the peak resident set size after each block.

    python benchmarks/bench_issue4_osses_king.py [--durations 1 10] [--batches 1 8]
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np
import torch

from lhotse_amt.features.casp import (
    King2019Config,
    King2019Extractor,
    Osses2021Config,
    Osses2021Extractor,
)
from lhotse_amt.models.king2019 import King2019
from lhotse_amt.models.osses2021 import Osses2021

FS = 44100


def noise(seconds: float, batch: int) -> torch.Tensor:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, int(seconds * FS))) * 10 ** ((65 - 100) / 20)
    return torch.tensor(x, dtype=torch.float32)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def timed(fn, reps: int = 1) -> float:
    fn()  # warm-up (numba compilation, caches)
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t) / reps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--durations", type=float, nargs="+", default=[1.0, 10.0])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    args = ap.parse_args()
    torch.set_num_threads(1)
    models = {
        "osses2021": (Osses2021(FS), Osses2021Extractor(Osses2021Config(sampling_rate=FS))),
        "king2019": (King2019(FS), King2019Extractor(King2019Config(sampling_rate=FS))),
    }
    print(f"fs={FS} Hz, float32, torch threads={torch.get_num_threads()}")
    print(f"{'model':<10} {'what':<9} {'dur':>5} {'batch':>5} {'RTF':>8} {'peak RSS MB':>12}")
    for name, (model, ex) in models.items():
        for what in ("forward", "extractor"):
            for dur in args.durations:
                for B in args.batches:
                    x = noise(dur, B)
                    if what == "forward":

                        def fn(x=x, model=model):
                            with torch.inference_mode():
                                model(x)
                    else:
                        xs = list(x.numpy())

                        def fn(xs=xs, ex=ex):
                            ex.extract_batch(xs, FS)

                    t = timed(fn)
                    rtf = t / (dur * B)
                    print(
                        f"{name:<10} {what:<9} {dur:>5g} {B:>5d} {rtf:>8.4f} {peak_rss_mb():>12.0f}"
                    )


if __name__ == "__main__":
    main()
