"""A small built-in example: a few synthetic utterances (or espeak-ng speech when it is
installed) turned into a CutSet, features from every registered auditory model stored
with Lhotse, and a PNG per model. Used by ``lhotse-amt amt demo``."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import soundfile as sf

if TYPE_CHECKING:
    from lhotse import CutSet

__all__ = ["make_example_cuts", "run_demo"]

_TEXTS = ["auditory models meet lhotse", "the quick brown fox", "one two three four five"]


def _synth_vowels(seed: int, sr: int) -> np.ndarray:
    """A vowel-like harmonic complex with a gliding f0, formants and 4-Hz syllable rhythm."""
    rng = np.random.default_rng(seed)
    dur = 1.2 + 0.2 * seed
    t = np.arange(int(dur * sr)) / sr
    f0 = 110 + 30 * seed + 20 * np.sin(2 * np.pi * 0.8 * t)
    phase = 2 * np.pi * np.cumsum(f0) / sr
    x = np.zeros_like(t)
    formants = [(700, 90), (1200, 110), (2600, 160)]
    for k in range(1, 40):
        fk = k * f0
        gain = sum(np.exp(-0.5 * ((fk - fm) / bw) ** 2) for fm, bw in formants) + 0.02
        x += gain * np.sin(k * phase) / k**0.5
    x *= 0.5 * (1 - np.cos(2 * np.pi * 4 * t)) ** 1.5
    x += 0.01 * rng.standard_normal(len(t)) * x.std()
    return x


def make_example_cuts(root: Path, sampling_rate: int = 16000, channels: int = 1) -> CutSet:
    """Write three ~1.5-s utterances at 65 dB SPL (AMT scale) and return their CutSet."""
    from lhotse import CutSet, Recording, SupervisionSegment

    root.mkdir(parents=True, exist_ok=True)
    espeak = shutil.which("espeak-ng")
    cuts = []
    for i, text in enumerate(_TEXTS):
        path = root / f"example{i}_{sampling_rate}.wav"
        x = None
        if espeak:
            raw = root / f"raw{i}.wav"
            subprocess.run([espeak, "-w", str(raw), text], check=True, capture_output=True)
            y, fs = sf.read(raw, dtype="float64")
            raw.unlink()
            from scipy.signal import resample_poly

            g = np.gcd(int(fs), sampling_rate)
            x = resample_poly(y, sampling_rate // g, int(fs) // g)
        if x is None:
            x = _synth_vowels(i, sampling_rate)
        x = x / np.sqrt(np.mean(x**2)) * 10 ** ((65 - 100) / 20)
        sf.write(path, np.stack([x] * channels, 1), sampling_rate, subtype="FLOAT")
        rec = Recording.from_file(path, recording_id=f"example{i}")
        cut = rec.to_cut()
        cut.supervisions = [
            SupervisionSegment(f"example{i}", rec.id, 0.0, rec.duration, text=text.upper())
        ]
        cuts.append(cut)
    return CutSet.from_cuts(cuts)


def run_demo(out_dir: str | Path, models: list[str] | None = None) -> list[dict]:
    """Extract and store features of the example with each model; returns a summary."""
    from lhotse.features.base import FEATURE_EXTRACTORS

    import lhotse_amt  # noqa: F401

    from .plotting import plot_features

    out = Path(out_dir)
    names = models or sorted(n for n in FEATURE_EXTRACTORS if n.startswith("amt-"))
    summary = []
    for name in names:
        cls = FEATURE_EXTRACTORS[name]
        cfg = cls.config_type()
        if cls.input_channels == 2 and hasattr(cfg, "diotic"):
            cfg.diotic = True
        ex = cls(cfg)
        sr = cfg.sampling_rate
        cuts = make_example_cuts(out / "audio", sr)
        t0 = time.perf_counter()
        with_feats = cuts.compute_and_store_features(
            ex, out / "features" / name, progress_bar=False
        )
        dt = time.perf_counter() - t0
        with_feats.to_file(out / f"cuts_{name}.jsonl.gz")
        first = next(iter(with_feats))
        feats = first.load_features()
        plot_features(
            feats,
            ex.feature_names(),
            ex.frame_shift,
            out / f"{name}.png",
            f"{name}: {first.id}",
            feature_type=name,
        )
        audio_s = sum(c.duration for c in cuts)
        summary.append(
            dict(
                model=name, frames=feats.shape[0], dim=feats.shape[1], seconds=dt, rtf=dt / audio_s
            )
        )
    return summary
