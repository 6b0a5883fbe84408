"""Real-time factor of the Glasberg2002 and Moore2016 loudness models (CPU, one thread).

RTF = process CPU time / audio duration at 32 kHz (``time.process_time``, so other load on
the machine affects it less than wall-clock time), batch 1 (stereo for Moore2016), for a
1-kHz tone at 60 dB SPL (sparse spectrum), pink-ish noise at 65 dB SPL (dense spectrum:
every FFT bin is a kept component, the worst case of the excitation stage) and a speech-like
signal (harmonic complex with a falling spectrum, syllable-rate modulation and pauses, 65 dB
SPL); all presented diotically (both ears identical, which Moore2016 detects and computes
once), plus, for Moore2016, ``noise-dich``: independent noises at the two ears (the general
stereo case, both ears computed). Best of ``--reps`` runs (other processes on the machine only make runs slower). Prints
the target RTF of the issue (Glasberg2002 <= 0.05 mono, Moore2016 <= 0.1 stereo, float32) and
the peak resident set size of the process after each row. Set ``OMP_NUM_THREADS=1`` and
``NUMBA_NUM_THREADS=1`` as well for a strict one-thread figure.

    python benchmarks/bench_loudness.py [--dtype float32|float64] [--durations 1 10]
"""

from __future__ import annotations

import argparse
import resource
import time

import _settings  # noqa: F401  (huge pages, host cache: before any tensor is made)
import numpy as np
import torch

from lhotse_amt.models.glasberg2002 import Glasberg2002
from lhotse_amt.models.moore2016 import Moore2016

FS = 32000


def signal(kind: str, seconds: float, channels: int, seed: int = 0) -> torch.Tensor:
    n = int(seconds * FS)
    rng = np.random.default_rng(seed)
    t = np.arange(n) / FS
    if kind == "tone":
        x = np.sqrt(2) * 20e-6 * 10 ** (60 / 20) * np.sin(2 * np.pi * 1000 * t)
    elif kind == "speech":
        f0 = 120.0 * (1.0 + 0.1 * np.sin(2 * np.pi * 0.7 * t))
        phase = 2 * np.pi * np.cumsum(f0) / FS
        x = sum(np.sin(h * phase) / h**1.5 for h in range(1, 60))
        x *= np.clip(np.sin(2 * np.pi * 4.0 * t), 0.0, None) ** 0.5  # syllables and pauses
        x += 0.02 * rng.standard_normal(n)  # fricative-like noise floor
        x *= 20e-6 * 10 ** (65 / 20) / np.sqrt(np.mean(x**2))
    else:
        spec = np.fft.rfft(rng.standard_normal(n))
        f = np.fft.rfftfreq(n, 1 / FS)
        spec /= np.sqrt(np.maximum(f, 50.0))
        x = np.fft.irfft(spec, n)
        x *= 20e-6 * 10 ** (65 / 20) / np.sqrt(np.mean(x**2))
    x = np.stack([x] * channels) if channels > 1 else x
    if kind == "noise-dich" and channels > 1:  # independent noise at the other ear(s)
        x = np.stack(
            [x[0]] + [signal("noise", seconds, 1, seed=s).numpy() for s in range(1, channels)]
        )
    return torch.tensor(x)


def bench(model: torch.nn.Module, x: torch.Tensor, seconds: float, reps: int) -> float:
    with torch.no_grad():
        model(x)  # warm-up (numba compilation, allocator)
        best = float("inf")
        for _ in range(reps):
            t = time.process_time()
            model(x)
            best = min(best, time.process_time() - t)
    return best / seconds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--durations", type=float, nargs="+", default=[1.0, 10.0])
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    dtype = getattr(torch, args.dtype)
    models = {
        "Glasberg2002 (mono)": (Glasberg2002(dtype=dtype), 1, 0.05),
        "Moore2016 (stereo)": (Moore2016(dtype=dtype), 2, 0.1),
    }
    print(f"torch {torch.__version__}, threads={torch.get_num_threads()}, dtype={args.dtype}")
    print(f"{'model':22s} {'signal':10s} {'dur/s':>6s} {'RTF':>8s} {'target':>7s} {'RSS/MiB':>8s}")
    for name, (model, ch, target) in models.items():
        kinds = ("tone", "noise", "speech") + (("noise-dich",) if ch > 1 else ())
        for kind in kinds:
            for dur in args.durations:
                x = signal(kind, dur, ch).to(dtype)
                rtf = bench(model, x, dur, args.reps)
                peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
                print(f"{name:22s} {kind:10s} {dur:6.1f} {rtf:8.4f} {target:7.2f} {peak:8.0f}")


if __name__ == "__main__":
    main()
