"""Small CutSets made on the fly for the integration tests (real speech from espeak-ng
when it is installed, otherwise harmonic complexes with noise)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import soundfile as sf
from lhotse import CutSet, Recording, SupervisionSegment

SENTENCES = [
    "the quick brown fox jumps over the lazy dog",
    "auditory models turn sound into features",
    "hello world",
    "she sells sea shells by the sea shore",
]


def _speech(text: str, sr: int, path: Path) -> np.ndarray | None:
    exe = shutil.which("espeak-ng")
    if exe is None:
        return None
    raw = path.with_suffix(".raw.wav")
    subprocess.run([exe, "-w", str(raw), "-s", "170", text], check=True, capture_output=True)
    x, fs = sf.read(raw, dtype="float64")
    raw.unlink()
    if x.ndim > 1:
        x = x[:, 0]
    if fs != sr:
        from scipy.signal import resample_poly

        g = np.gcd(int(fs), int(sr))
        x = resample_poly(x, sr // g, fs // g)
    return x


def _synthetic(seed: int, sr: int, duration: float) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(duration * sr)) / sr
    f0 = 100 + 40 * seed
    x = sum(np.sin(2 * np.pi * k * f0 * t) / k for k in range(1, 8))
    x *= 0.5 * (1 + np.sin(2 * np.pi * 4 * t))
    return 0.05 * x + 0.005 * rng.standard_normal(len(t))


def make_cuts(
    root: Path,
    n: int = 3,
    sr: int = 16000,
    channels: int = 1,
    speech: bool = True,
    max_duration: float | None = 1.2,
) -> CutSet:
    """``n`` cuts of real speech (or synthetic sound) at ``sr`` with ``channels`` channels,
    scaled to about 65 dB SPL on the AMT scale, each with one supervision."""
    root.mkdir(parents=True, exist_ok=True)
    cuts = []
    for i in range(n):
        path = root / f"utt{i}.wav"
        x = _speech(SENTENCES[i % len(SENTENCES)], sr, path) if speech else None
        if x is None:
            x = _synthetic(i, sr, 0.7 + 0.23 * i)
        if max_duration is not None:
            x = x[: int(max_duration * sr)]
        x = x / (np.sqrt(np.mean(x**2)) + 1e-12) * 10 ** ((65 - 100) / 20)
        data = np.stack([x * (1.0 - 0.3 * c) for c in range(channels)], axis=1)
        sf.write(path, data, sr, subtype="FLOAT")
        rec = Recording.from_file(path, recording_id=f"rec{i}")
        cut = rec.to_cut() if channels == 1 else rec.to_cut()
        cut.supervisions = [
            SupervisionSegment(
                id=f"sup{i}",
                recording_id=rec.id,
                start=0.0,
                duration=rec.duration,
                channel=0 if channels == 1 else list(range(channels)),
                text=SENTENCES[i % len(SENTENCES)].upper(),
            )
        ]
        cuts.append(cut)
    return CutSet.from_cuts(cuts)
