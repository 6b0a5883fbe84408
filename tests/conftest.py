import os
from pathlib import Path

import numpy as np
import pytest
import torch

#: The reference outputs the fidelity tests compare with: the compact excerpts committed under
#: ``tests/data/reference`` (see ``tests/data/README.md``), or the full reference set where
#: ``$LHOTSE_AMT_REFERENCE`` points to one (same file names and keys).
REFERENCE = Path(
    os.environ.get("LHOTSE_AMT_REFERENCE", Path(__file__).resolve().parent / "data" / "reference")
)

#: Loudness stimuli of the reference set (``loudness/README.md`` of the full set), fs 32 kHz.
LOUDNESS_FS = 32000
LOUDNESS_STIMULI = ("tone1k_40dB", "tone1k_60dB", "burst1k_60dB", "sam1k_4Hz_60dB")


def _npz(path: Path) -> dict:
    if not path.exists():
        raise FileNotFoundError(
            f"reference data file {path} is missing: the excerpts live in tests/data/reference "
            "(LHOTSE_AMT_REFERENCE, if set, must point to a complete reference set)"
        )
    with np.load(path, allow_pickle=False) as z:
        d = {k: z[k] for k in z.files}
    return {k: (v.item() if v.ndim == 0 else v) for k, v in d.items()}


def load_reference(name: str) -> dict:
    """Load one CASP reference ``.npz`` (0-d arrays become Python scalars) with ``x``, the whole
    input signal, and ``t_index`` / ``t_index_mod``, the output sample indices that the stored
    front-end / modulation-domain arrays hold (time is their last axis)."""
    d = _npz(REFERENCE / name)
    if "x" not in d:  # excerpts: the inputs are stored once, in inputs_fs<fs>.npz
        d["x"] = _npz(REFERENCE / f"inputs_fs{d['fs']}.npz")[d["signal"]]
    if "t_index" not in d:  # the full set: a stride up to a covered length
        d["t_index"] = np.arange(0, d["n_samples_covered"], d["t_stride"])
        if d["t_stride_mod"]:
            d["t_index_mod"] = np.arange(0, d["n_samples_covered_mod"], d["t_stride_mod"])
    return d


def pick(y, d, mod=False):
    """The stored channels and time samples of a full-rate output ``y`` (all channels, time
    last)."""
    y = np.asarray(y)[d["channel_index"]]
    return y[..., d["t_index_mod"] if mod else d["t_index"]]


def rel_err(yours, ref):
    return float(np.max(np.abs(np.asarray(yours, np.float64) - ref)) / np.max(np.abs(ref)))


def loudness_stimulus(name: str) -> np.ndarray:
    """One loudness reference stimulus (one ear, pascals, fs 32 kHz) from its definition: 1-kHz
    tone (1 s), tone burst (100 ms at 0.1-0.2 s in 0.5 s) or 4-Hz 100 % SAM tone (1 s), 10-ms
    raised-cosine ramps, peak amplitude ``sqrt(2) * 20e-6 * 10**(L / 20)`` Pa."""
    if name not in LOUDNESS_STIMULI:
        raise ValueError(f"unknown loudness stimulus {name!r}; expected one of {LOUDNESS_STIMULI}")
    fs = LOUDNESS_FS
    level = float(name.rsplit("_", 1)[1].removesuffix("dB"))
    amp = np.sqrt(2) * 20e-6 * 10 ** (level / 20)

    def ramped(n: int, am_hz: float = 0.0) -> np.ndarray:
        t = np.arange(n) / fs
        r = 0.5 * (1 - np.cos(np.pi * np.arange(320) / 320))
        w = np.ones(n)
        w[:320], w[n - 320 :] = r, r[::-1]
        env = amp * (1 + np.sin(2 * np.pi * am_hz * t)) if am_hz else amp
        return env * np.sin(2 * np.pi * 1000 * t) * w

    if name.startswith("burst"):
        x = np.zeros(fs // 2)
        x[3200:6400] = ramped(3200)
        return x
    return ramped(fs, 4.0 if name.startswith("sam") else 0.0)


def load_loudness(model: str, name: str) -> dict:
    """Load one loudness reference file (``model`` = "glasberg2002" or "moore2016") with ``x_pa``
    (Glasberg2002: ``(N,)``; Moore2016: ``(N, 2)``, diotic) and, for Moore2016,
    ``inst_spec_all_frames``: the frames that ``inst_spec_all`` holds."""
    d = _npz(REFERENCE / "loudness" / f"{model}_{name}.npz")
    if "x_pa" not in d:  # excerpts: the stimuli are re-made from their definition
        x = loudness_stimulus(name)
        d["x_pa"] = np.stack([x, x], 1) if model == "moore2016" else x
    if model == "moore2016" and "inst_spec_all_frames" not in d:
        d["inst_spec_all_frames"] = np.arange(len(d["frame_index"]))
    return d


@pytest.fixture(autouse=True)
def _torch_seed():
    torch.manual_seed(0)
    np.random.seed(0)
