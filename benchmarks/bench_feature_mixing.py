"""Error of Lhotse's feature-domain mixing against extracting features from the mixed audio.

Speech (espeak-ng sentences when it is installed, else harmonic complexes with a 4-Hz
envelope) at 65 dB SPL plus white noise at each SNR: the noise is added to the audio the way
Lhotse's ``AudioMixer`` does (gain from the mean squares of the two signals) and the features
are extracted from the mix (exact, ``mix_eagerly=True``); the same pair is mixed in the
feature domain by Lhotse's ``FeatureMixer`` with the extractor's ``mix``/``compute_energy``
hooks (what a lazy ``MixedCut.load_features`` does). Printed per extractor and SNR: the mean
absolute difference relative to the mean feature magnitude of the audio mix, for the feature
mix and for ignoring the noise (the clean speech's features).

    python benchmarks/bench_feature_mixing.py [-m amt-dau1997 ...] [--snr 60 20 10 0]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
from pathlib import Path

import _settings  # noqa: F401  (huge pages, host cache: before any tensor is made)
import numpy as np
import soundfile as sf
from lhotse.features.base import FEATURE_EXTRACTORS
from lhotse.features.mixer import FeatureMixer
from scipy.signal import resample_poly

import lhotse_amt  # noqa: F401  (registers the extractors)

SENTENCES = (
    "the quick brown fox jumps over the lazy dog",
    "auditory models turn sound into features",
    "she sells sea shells by the sea shore",
)


def speech(sr: int) -> tuple[list[np.ndarray], str]:
    """A few utterances at ``sr`` (espeak-ng, else synthetic), each at 65 dB SPL."""
    exe = shutil.which("espeak-ng")
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, text in enumerate(SENTENCES):
            if exe is not None:
                path = Path(tmp) / f"{i}.wav"
                subprocess.run([exe, "-w", str(path), text], check=True, capture_output=True)
                x, fs = sf.read(path, dtype="float64")
                x = x if x.ndim == 1 else x[:, 0]
                g = np.gcd(int(fs), sr)
                x = resample_poly(x, sr // g, int(fs) // g)
            else:
                t = np.arange(int(2.0 * sr)) / sr
                f0 = 100 + 40 * i
                x = sum(np.sin(2 * np.pi * k * f0 * t) / k for k in range(1, 8))
                x = x * 0.5 * (1 + np.sin(2 * np.pi * 4 * t))
            out.append(x * 10 ** ((65 - 100) / 20) / np.sqrt(np.mean(x**2)))
    return out, "espeak-ng speech" if exe is not None else "synthetic harmonic complexes"


def errors(name: str, snrs: list[float]) -> tuple[dict[float, tuple[float, float]], str]:
    cls = FEATURE_EXTRACTORS[name]
    ex = cls(cls.config_type())
    sr = ex.config.sampling_rate
    utts, kind = speech(sr)
    rng = np.random.default_rng(0)
    res: dict[float, list[tuple[float, float, float]]] = {s: [] for s in snrs}
    for x in utts:
        n = rng.standard_normal(len(x))
        fx = ex.extract(x.astype(np.float32), sr)
        fn = ex.extract(n.astype(np.float32), sr)
        for snr in snrs:
            gain = np.sqrt(np.mean(x**2) / (np.mean(n**2) * 10 ** (snr / 10)))
            fa = ex.extract((x + gain * n).astype(np.float32), sr)  # features of the mixed audio
            mixer = FeatureMixer(ex, fx, frame_shift=ex.frame_shift)
            mixer.add_to_mix(fn, sampling_rate=sr, snr=snr)
            ff = mixer.mixed_feats
            k = min(len(fa), len(ff))
            ref = float(np.mean(np.abs(fa[:k])))
            res[snr].append(
                (
                    float(np.mean(np.abs(ff[:k] - fa[:k]))),
                    float(np.mean(np.abs(fx[:k] - fa[:k]))),
                    ref,
                )
            )
    out = {}
    for snr, rows in res.items():
        a = np.array(rows)
        out[snr] = (a[:, 0].sum() / a[:, 2].sum(), a[:, 1].sum() / a[:, 2].sum())
    return out, kind


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", action="append")
    ap.add_argument("--snr", type=float, nargs="+", default=[60.0, 20.0, 10.0, 0.0])
    args = ap.parse_args()
    names = args.model or ["amt-dau1997", "amt-osses2021"]
    print(f"{'extractor':16s} {'SNR dB':>7s} {'feature mix':>12s} {'noise ignored':>14s}")
    for name in names:
        res, kind = errors(name, args.snr)
        for snr in args.snr:
            fm, ig = res[snr]
            print(f"{name:16s} {snr:7g} {100 * fm:11.2f}% {100 * ig:13.2f}%", flush=True)
    print(f"(speech: {kind}; white noise; error = mean |difference| / mean |features of the mix|)")


if __name__ == "__main__":
    main()
