"""Feature extractors of the digit recipe and the cached extraction of cut sets.

Every extractor runs with a 10-ms frame shift. FSDD is 8 kHz speech with no energy
above 4 kHz, so:

* ``kaldi-fbank``: Lhotse's pure-torch Kaldi filterbank (``lhotse.Fbank``) at the native
  8 kHz, 40 mel bands from 20 to 3600 Hz (Kaldi's ``high_freq=-400``); 25-ms window,
  log energies (80 bands, Lhotse's default, leaves empty bands at this rate).
* ``amt-dau1997``, ``amt-osses2021``, ``amt-king2019``: the cuts are resampled to
  16 kHz (the models' default rate; their stored filters/defaults are defined there) and
  the auditory channels span 80-3600 Hz (1 per ERB; the default 8 kHz upper limit would
  put a third of the channels where there is no signal).
* ``amt-paulick2024``: 16 kHz instead of its 44.1-kHz default (``sampling_rate=16000``;
  the DRNL, ear filters and modulation stage are defined for any rate; 44.1 kHz would
  cost 2.8x the time for no information above 4 kHz), 24 DRNL channels from 125 Hz
  (its default lower limit) to 3600 Hz, i.e. about 1 per ERB like the others (the default
  50 channels over 125-8000 Hz are 1.7 per ERB).

Speech is presented at 65 dB SPL on the AMT scale (digital rms 1 = 100 dB SPL): every cut
(clean or mixed) is scaled by the gain that brings its *speech* to 65 dB SPL, so the noise
is at ``65 - SNR`` dB SPL. The same audio goes to every extractor.
"""

from __future__ import annotations

import os
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from lhotse import CutSet, Fbank, FbankConfig
from lhotse.cut import MixedCut
from lhotse.features.base import FEATURE_EXTRACTORS, FeatureExtractor
from scipy.signal import resample_poly

import lhotse_amt  # noqa: F401  registers the amt-* extractors

__all__ = [
    "DEFAULT_FEATURES",
    "LEVEL_DB_SPL",
    "build_extractor",
    "extract_sets",
    "load_features",
    "recipe_config",
]

DEFAULT_FEATURES = (
    "kaldi-fbank",
    "amt-dau1997",
    "amt-osses2021",
    "amt-king2019",
    "amt-paulick2024",
)

#: speech presentation level (dB SPL, AMT scale: rms 1 = 100 dB SPL)
LEVEL_DB_SPL = 65.0

_CASP_RATE = 16000
_FHIGH = 3600.0

_DEFAULTS: dict[str, dict[str, Any]] = {
    "kaldi-fbank": {"sampling_rate": 8000, "num_filters": 40},
    "amt-dau1997": {"sampling_rate": _CASP_RATE, "flow": 80.0, "fhigh": _FHIGH},
    "amt-osses2021": {"sampling_rate": _CASP_RATE, "flow": 80.0, "fhigh": _FHIGH},
    "amt-king2019": {"sampling_rate": _CASP_RATE, "flow": 80.0, "fhigh": _FHIGH},
    "amt-paulick2024": {
        "sampling_rate": _CASP_RATE,
        "flow": 125.0,
        "fhigh": _FHIGH,
        "n_channels": 24,
    },
}


def recipe_config(spec: str) -> tuple[str, dict[str, Any]]:
    """``(extractor name, config overrides)`` of a spec ``NAME[:key=value,...]``: the
    recipe's defaults for ``NAME`` (module docstring) updated by the given keys (values
    parsed as YAML scalars)."""
    name, _, rest = spec.partition(":")
    if name not in FEATURE_EXTRACTORS:
        known = ", ".join(sorted(FEATURE_EXTRACTORS))
        raise ValueError(f"unknown feature type {name!r}; registered: {known}")
    cfg = dict(_DEFAULTS.get(name, {}))
    for kv in filter(None, rest.split(",")):
        k, eq, v = kv.partition("=")
        if not eq:
            raise ValueError(f"feature spec {spec!r}: {kv!r} is not key=value")
        cfg[k.strip()] = yaml.safe_load(v)
    cfg["frame_shift"] = 0.01
    return name, cfg


def build_extractor(spec: str) -> FeatureExtractor:
    """The extractor of a spec (:func:`recipe_config`); unknown config keys are an error."""
    name, over = recipe_config(spec)
    if name == "kaldi-fbank":
        cfg: Any = FbankConfig()
        cls: Any = Fbank
    else:
        cls = FEATURE_EXTRACTORS[name]
        cfg = cls().config
    for k, v in over.items():
        if not hasattr(cfg, k):
            raise ValueError(f"{name} has no config key {k!r}")
        setattr(cfg, k, v)
    return cls(cfg)


def _rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x, dtype=np.float64))))


def cut_audio(cut: Any, sampling_rate: int, level_db_spl: float = LEVEL_DB_SPL) -> np.ndarray:
    """The (mixed) audio of a cut, float32 mono at ``sampling_rate``, scaled so that its
    speech (the cut itself, or a ``MixedCut``'s first track) is at ``level_db_spl``."""
    x = cut.load_audio()[0].astype(np.float64)
    speech = cut.tracks[0].cut.load_audio()[0] if isinstance(cut, MixedCut) else x
    r = _rms(speech)
    if r == 0.0:
        raise ValueError(f"cut {cut.id}: silent speech, cannot set its level")
    x = x * (10 ** ((level_db_spl - 100.0) / 20.0) / r)
    if sampling_rate != cut.sampling_rate:
        q = Fraction(int(sampling_rate), int(cut.sampling_rate))
        x = resample_poly(x, q.numerator, q.denominator)
    return x.astype(np.float32)


def extract_sets(spec: str, jobs: list[tuple[str, str]], threads: int = 1) -> list[str]:
    """Extract ``spec`` features of the cuts of each ``(cuts manifest, output .npz)`` job
    (skipped when the .npz exists). The .npz holds ``feats`` (all frames, ``(sum T, F)``
    float32), ``lengths`` ``(N,)``, ``labels`` ``(N,)`` (the digit) and ``ids``. Runs in
    worker processes (module-level and picklable)."""
    torch.set_num_threads(max(1, int(threads)))
    ex = build_extractor(spec)
    sr = int(ex.config.sampling_rate)
    done = []
    for cuts_path, out_path in jobs:
        out = Path(out_path)
        if out.exists():
            done.append(str(out))
            continue
        feats, lengths, labels, ids = [], [], [], []
        for cut in CutSet.from_file(cuts_path):
            f = np.asarray(ex.extract(cut_audio(cut, sr), sr), dtype=np.float32)
            feats.append(f)
            lengths.append(f.shape[0])
            labels.append(int(cut.supervisions[0].custom["digit"]))
            ids.append(cut.supervisions[0].recording_id)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.stem + ".tmp.npz")
        np.savez(
            tmp,
            feats=np.concatenate(feats),
            lengths=np.asarray(lengths, np.int64),
            labels=np.asarray(labels, np.int64),
            ids=np.asarray(ids),
        )
        os.replace(tmp, out)
        done.append(str(out))
    return done


def load_features(path: str | Path, cmn: bool = False) -> tuple[list[np.ndarray], np.ndarray]:
    """``(list of (T_i, F) arrays, labels (N,))`` from an :func:`extract_sets` file;
    ``cmn`` subtracts each item's mean over frames."""
    with np.load(path) as z:
        feats, lengths, labels = z["feats"], z["lengths"], z["labels"]
    items = np.split(feats, np.cumsum(lengths)[:-1])
    if cmn:
        items = [f - f.mean(0, keepdims=True) for f in items]
    return items, labels
