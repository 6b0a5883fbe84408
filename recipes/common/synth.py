"""Synthetic corpora for CI and the smoke configurations: espeak-ng speech with several
voices, speeds and pitches, random short sentences from a fixed word list (deterministic
seeds), written like a ``lhotse prepare`` output directory, plus synthetic noise
recordings. Nothing is downloaded."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import soundfile as sf
from lhotse import Recording, RecordingSet, SupervisionSegment, SupervisionSet
from tqdm.auto import tqdm

__all__ = ["VOICES", "WORDS", "espeak_available", "make_noise", "make_speech_corpus", "sentence"]

#: a fixed vocabulary (every letter of the alphabet occurs)
WORDS = (
    "one two three four five six seven eight nine zero yes no up down left right on off "
    "stop go red green blue black white quick brown fox jumps over lazy dog bird cat fish "
    "house tree river music sound voice hello world model ear loud quiet fast slow big small "
    "open close water zebra jazz king queen box"
).split()

#: espeak-ng voices (base voices and variants)
VOICES = ("en-us", "en+f3", "en+m3", "en-gb", "en+f4", "en-gb-x-rp", "en+m7", "en+f2")

#: dB SPL of the written speech on the AMT scale (rms 1 = 100 dB SPL)
LEVEL_DB_SPL = 65.0


def espeak_available() -> bool:
    return shutil.which("espeak-ng") is not None


def sentence(rng: np.random.Generator, min_words: int = 2, max_words: int = 5) -> str:
    n = int(rng.integers(min_words, max_words + 1))
    return " ".join(rng.choice(WORDS, size=n))


def _resample(x: np.ndarray, fs: int, sr: int) -> np.ndarray:
    if fs == sr:
        return x
    from scipy.signal import resample_poly

    g = np.gcd(int(fs), int(sr))
    return resample_poly(x, sr // g, fs // g)


def synthesize(text: str, voice: str, speed: int, pitch: int, sr: int) -> np.ndarray:
    """espeak-ng speech at ``sr`` Hz, float64, scaled to :data:`LEVEL_DB_SPL`."""
    exe = shutil.which("espeak-ng")
    if exe is None:
        raise RuntimeError("espeak-ng is not installed (apt-get install espeak-ng)")
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "x.wav"
        cmd = [exe, "-v", voice, "-s", str(speed), "-p", str(pitch), "-w", str(raw), text]
        subprocess.run(cmd, check=True, capture_output=True)
        x, fs = sf.read(raw, dtype="float64")
    if x.ndim > 1:
        x = x[:, 0]
    x = _resample(x, fs, sr)
    # trim leading/trailing silence to 50 ms
    nz = np.flatnonzero(np.abs(x) > 1e-3 * np.abs(x).max())
    pad = int(0.05 * sr)
    x = x[max(0, nz[0] - pad) : nz[-1] + pad]
    return x / np.sqrt(np.mean(x**2)) * 10 ** ((LEVEL_DB_SPL - 100.0) / 20.0)


def make_speech_corpus(
    out_dir: str | Path,
    splits: dict[str, int],
    sampling_rate: int = 16000,
    seed: int = 0,
    prefix: str = "synth",
    voices: tuple[str, ...] = VOICES,
    speeds: tuple[int, int] = (140, 200),
    pitches: tuple[int, int] = (30, 70),
    max_words: int = 5,
    min_words: int = 2,
    num_jobs: int = 2,
    progress_bar: bool = True,
) -> dict[str, tuple[Path, Path]]:
    """Write ``{prefix}_recordings_{split}.jsonl.gz`` and ``{prefix}_supervisions_{split}``
    ``.jsonl.gz`` (like ``lhotse prepare``) plus the audio under ``out_dir/wav/{split}``.

    Each split gets its own seed (``seed`` + split index), so a split's content does not
    depend on the sizes of the others. Existing complete manifests are reused.
    """
    out = Path(out_dir)
    paths = {}
    for k, (split, n) in enumerate(splits.items()):
        rec_path = out / f"{prefix}_recordings_{split}.jsonl.gz"
        sup_path = out / f"{prefix}_supervisions_{split}.jsonl.gz"
        paths[split] = (rec_path, sup_path)
        if rec_path.exists() and sup_path.exists() and len(RecordingSet.from_file(rec_path)) == n:
            continue
        rng = np.random.default_rng([seed, k])
        items = []
        for i in range(n):
            items.append(
                dict(
                    id=f"{split}-{i:05d}",
                    text=sentence(rng, min_words, max_words),
                    voice=str(voices[int(rng.integers(len(voices)))]),
                    speed=int(rng.integers(speeds[0], speeds[1] + 1)),
                    pitch=int(rng.integers(pitches[0], pitches[1] + 1)),
                )
            )
        wav_dir = out / "wav" / split
        wav_dir.mkdir(parents=True, exist_ok=True)

        def work(it: dict, wav_dir: Path = wav_dir) -> tuple[Recording, SupervisionSegment]:
            x = synthesize(it["text"], it["voice"], it["speed"], it["pitch"], sampling_rate)
            path = wav_dir / f"{it['id']}.wav"
            sf.write(path, x, sampling_rate, subtype="PCM_16")
            rec = Recording.from_file(path, recording_id=it["id"])
            sup = SupervisionSegment(
                id=it["id"],
                recording_id=it["id"],
                start=0.0,
                duration=rec.duration,
                channel=0,
                text=it["text"].upper(),
                language="English",
                speaker=f"{it['voice']}-p{it['pitch']}",
                custom={"voice": it["voice"], "speed": it["speed"], "pitch": it["pitch"]},
            )
            return rec, sup

        with ThreadPoolExecutor(max(1, num_jobs)) as ex:
            res = list(
                tqdm(
                    ex.map(work, items),
                    total=n,
                    desc=f"espeak-ng {split}",
                    disable=not progress_bar,
                )
            )
        RecordingSet.from_recordings(r for r, _ in res).to_file(rec_path)
        SupervisionSet.from_segments(s for _, s in res).to_file(sup_path)
    return paths


def _noise(kind: str, n: int, sr: int, rng: np.random.Generator) -> np.ndarray:
    w = rng.standard_normal(n)
    if kind == "white":
        x = w
    elif kind == "pink":
        f = np.fft.rfftfreq(n, 1 / sr)
        spec = np.fft.rfft(w) / np.sqrt(np.maximum(f, 20.0))
        x = np.fft.irfft(spec, n)
    elif kind == "speech-shaped":
        # long-term speech spectrum: flat to 500 Hz, then -6 dB/octave
        f = np.fft.rfftfreq(n, 1 / sr)
        g = np.where(f < 500.0, 1.0, (np.maximum(f, 1.0) / 500.0) ** (-6.0 / 20.0 / np.log10(2)))
        g[f < 60.0] = 0.0
        x = np.fft.irfft(np.fft.rfft(w) * g, n)
    elif kind == "modulated":
        # speech-shaped noise with a syllable-rate (2-8 Hz) random envelope
        x = _noise("speech-shaped", n, sr, rng)
        k = max(2, int(n / sr * 6))
        env = np.interp(np.arange(n), np.linspace(0, n, k), rng.uniform(0.1, 1.0, k))
        x = x * env
    else:
        raise ValueError(f"unknown noise kind {kind!r}")
    return x / np.sqrt(np.mean(x**2))


def make_noise(
    out_dir: str | Path,
    num: int = 4,
    duration: float = 20.0,
    sampling_rate: int = 16000,
    seed: int = 1234,
    kinds: tuple[str, ...] = ("speech-shaped", "pink", "white", "modulated"),
    prefix: str = "noise",
) -> Path:
    """Synthetic noise recordings (``{prefix}_recordings.jsonl.gz``, no supervisions, like
    ``lhotse prepare musan``), at 65 dB SPL on the AMT scale."""
    out = Path(out_dir)
    rec_path = out / f"{prefix}_recordings.jsonl.gz"
    if rec_path.exists() and len(RecordingSet.from_file(rec_path)) == num:
        return rec_path
    wav_dir = out / "wav"
    wav_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    recs = []
    for i in range(num):
        kind = kinds[i % len(kinds)]
        x = _noise(kind, int(duration * sampling_rate), sampling_rate, rng)
        x = x * 10 ** ((LEVEL_DB_SPL - 100.0) / 20.0)
        path = wav_dir / f"noise{i:03d}-{kind}.wav"
        sf.write(path, x, sampling_rate, subtype="FLOAT")
        recs.append(Recording.from_file(path, recording_id=f"noise{i:03d}-{kind}"))
    RecordingSet.from_recordings(recs).to_file(rec_path)
    return rec_path
