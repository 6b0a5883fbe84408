"""Noise for the digit recipe, made reproducibly from the training speech and a seed.

Four noise types (all at the corpus rate, 8 kHz, rms 1 before writing at a fixed level):

* ``babble``: the sum of ``talkers`` streams; each stream is a random sequence of
  recordings of the *training* speakers (each recording rms-normalised), so no test
  speaker's speech is ever in it.
* ``ssn``: speech-shaped noise, white Gaussian noise filtered with the long-term average
  spectrum (Welch PSD) of the training recordings.
* ``pink``: Gaussian noise with a 1/f power spectrum from 20 Hz to the Nyquist frequency.
* ``am``: speech-shaped noise, sinusoidally amplitude modulated at 4 Hz (syllable rate) with
  100 % depth.

Each call with a different ``seed`` gives a different realisation, so the noise segments
of training/dev (multi-condition) and of testing never coincide.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import soundfile as sf
from lhotse import CutSet, Recording, RecordingSet
from scipy.signal import welch

__all__ = ["NOISE_TYPES", "long_term_spectrum", "make_noise_recordings", "synthesize_noise"]

NOISE_TYPES = ("babble", "ssn", "pink", "am")

#: rms of the written noise files (digital full scale 1; the SNR sets the mixing gain)
_RMS = 0.05


def _rms_norm(x: np.ndarray) -> np.ndarray:
    r = float(np.sqrt(np.mean(np.square(x, dtype=np.float64))))
    if r == 0.0:
        raise ValueError("cannot normalise an all-zero signal")
    return x / r


def long_term_spectrum(signals: list[np.ndarray], fs: int, nperseg: int = 256) -> np.ndarray:
    """Long-term average power spectrum (Welch, Hann window, ``nperseg`` samples) of a
    list of 1-D signals, each weighted by its length. Returns ``(nperseg // 2 + 1,)``
    power per bin (arbitrary units) on ``np.fft.rfftfreq(nperseg, 1 / fs)``."""
    acc = np.zeros(nperseg // 2 + 1)
    tot = 0
    for x in signals:
        if len(x) < nperseg:
            continue
        _, p = welch(x, fs=fs, nperseg=nperseg)
        acc += p * len(x)
        tot += len(x)
    if tot == 0:
        raise ValueError(f"no signal is at least nperseg={nperseg} samples long")
    return acc / tot


def _shaped(n: int, fs: int, psd: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    w = rng.standard_normal(n)
    f = np.fft.rfftfreq(n, 1 / fs)
    fp = np.linspace(0.0, fs / 2, len(psd))
    g = np.sqrt(np.interp(f, fp, psd))
    return np.fft.irfft(np.fft.rfft(w) * g, n)


def synthesize_noise(
    kind: str,
    duration: float,
    fs: int,
    speech: list[np.ndarray],
    rng: np.random.Generator,
    talkers: int = 6,
    am_rate: float = 4.0,
) -> np.ndarray:
    """One noise signal of ``duration`` s at ``fs`` Hz, rms 1 (float64).

    ``speech``: training-speaker recordings at ``fs`` (the babble material and the source
    of the long-term spectrum). ``kind`` is one of :data:`NOISE_TYPES`."""
    if kind not in NOISE_TYPES:
        raise ValueError(f"unknown noise kind {kind!r}; choose from {NOISE_TYPES}")
    n = int(round(duration * fs))
    if kind == "babble":
        if not speech:
            raise ValueError("babble needs at least one training recording")
        out = np.zeros(n)
        for _ in range(talkers):
            parts, m = [], 0
            while m < n:
                x = speech[int(rng.integers(len(speech)))]
                parts.append(_rms_norm(x.astype(np.float64)))
                m += len(x)
            stream = np.concatenate(parts)
            start = int(rng.integers(0, len(stream) - n + 1))
            out += stream[start : start + n]
        return _rms_norm(out)
    if kind == "pink":
        f = np.fft.rfftfreq(n, 1 / fs)
        spec = np.fft.rfft(rng.standard_normal(n)) / np.sqrt(np.maximum(f, 20.0))
        return _rms_norm(np.fft.irfft(spec, n))
    ssn = _rms_norm(_shaped(n, fs, long_term_spectrum(speech, fs), rng))
    if kind == "ssn":
        return ssn
    t = np.arange(n) / fs
    phase = rng.uniform(0, 2 * np.pi)
    return _rms_norm(ssn * (1.0 + np.sin(2 * np.pi * am_rate * t + phase)))


def make_noise_recordings(
    out_dir: str | Path,
    speech: list[np.ndarray],
    fs: int,
    seed: int,
    tag: str,
    duration: float = 30.0,
    kinds: tuple[str, ...] = NOISE_TYPES,
) -> CutSet:
    """Write one wav file per noise kind (``{out_dir}/{tag}-{kind}.wav``, float) and return
    them as a CutSet of whole recordings (ids ``{tag}-{kind}``). Deterministic in ``seed``
    and the order of ``speech``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    recs = []
    for i, kind in enumerate(kinds):
        rng = np.random.default_rng([seed, i])
        x = synthesize_noise(kind, duration, fs, speech, rng) * _RMS
        path = out / f"{tag}-{kind}.wav"
        sf.write(path, x.astype(np.float32), fs, subtype="FLOAT")
        recs.append(Recording.from_file(path, recording_id=f"{tag}-{kind}"))
    return CutSet.from_manifests(recordings=RecordingSet.from_recordings(recs)).to_eager()
