"""Make the compact reference excerpts under ``tests/data/reference`` from the full reference set.

Run by hand (the full set is not part of the repository; see ``tests/data/README.md``)::

    python tests/data/make_reference_excerpts.py /path/to/reference [--out tests/data/reference]

``/path/to/reference`` is the full AMT reference pack (its ``README.md`` describes it) with the
loudness set in its ``loudness/`` folder. Every stored value is copied bit for bit from the
full set; only *which* values are kept changes:

* the CASP inputs (``inputs_fs*.npz``) are copied whole; the model files drop their copy of ``x``
  (the test loader takes it from the inputs file by the file's ``signal``);
* front-end arrays (``gt``, ``ihc``, ``adapt``, ``compressed``, ``ear``, ``drnl``, ...) keep every
  stored channel at the sample indices ``t_index``: every sample of the first
  ``ONSET_S`` seconds, then every ``FE_STRIDE[fs]``-th sample up to the end of what the full set
  covers;
* modulation-domain arrays (``mod*``, ``E_mod``, ``out``) keep every stored channel and band at the
  sample indices ``t_index_mod``: every ``MOD_THIN[fs]``-th of the full set's stored samples;
* the gammatone impulse responses are thinned like the front-end arrays;
* loudness files keep every frame of the loudness time series, the per-frame spectra at their
  selected frames, and Moore2016's instantaneous specific loudness at every
  ``SPEC_THIN``-th frame (``inst_spec_all_frames``); the secondary implementation's arrays
  (``alt_*``) and the arrays no test compares are dropped, and so is ``x_pa`` (the stimuli are
  re-made from their definition by ``tests/conftest.py:loudness_stimulus``; this script checks
  that they agree with the stored ones to ``STIMULUS_RTOL``).

All strides are coprime with the period of the 1-kHz carrier in samples (16 at 16 kHz, 441 per
ten periods at 44.1 kHz), so the kept samples still visit every phase of it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from conftest import LOUDNESS_STIMULI, loudness_stimulus  # noqa: E402

ONSET_S = 0.010
FE_STRIDE = {16000: 37, 44100: 59}
MOD_THIN = {16000: 19, 44100: 23}
SPEC_THIN = 10
STIMULUS_RTOL = 1e-15

FRONT_END = ("gt", "ihc", "adapt", "compressed", "ear", "drnl", "lp2001_drnl")
MODULATION = ("mod_default", "mod_mfbdau", "mod", "E_mod", "out")
# full-set keys that no test reads and that would dominate the size
DROP = ("x", "hp", "t_stride", "n_samples_covered", "t_stride_mod", "n_samples_covered_mod")
CASP = [
    f"{m}_{s}_fs{fs}.npz"
    for m in ("dau1997", "king2019", "osses2021", "drnl")
    for s in ("tone1k", "am8")
    for fs in (16000, 44100)
]
GLASBERG_KEEP = (
    "fs level_db_spl level_definition stimulus frame_index frame_times_s erb_fc_hz erb_numbers "
    "inst stl ltl max_ltl spec_frames spec_frame_times_s specific_loudness meta_json"
).split()
MOORE_KEEP = (
    "fs level_db_spl level_definition stimulus frame_index frame_times_s erb_numbers erb_fc_hz "
    "stl ltl stl_left stl_right ltl_left ltl_right inst_left inst_right max_ltl stl_2016 ltl_2016 "
    "stl_left_2016 stl_right_2016 ltl_left_2016 ltl_right_2016 spec_frames spec_frame_times_s "
    "stl_spec excitation_db inst_spec_all meta_json"
).split()


def _load(path: Path) -> dict:
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def _sample_index(n_covered: int, stride: int, fs: int, dense_s: float) -> np.ndarray:
    """Every sample below ``dense_s`` seconds, then every ``stride``-th one."""
    n_dense = min(round(dense_s * fs), n_covered)
    return np.concatenate([np.arange(n_dense), np.arange(n_dense, n_covered, stride)])


def _casp(d: dict, name: str) -> dict:
    fs = int(d["fs"])
    stored = np.arange(0, int(d["n_samples_covered"]), int(d["t_stride"]))
    keep = _sample_index(len(stored), FE_STRIDE[fs], fs, ONSET_S)
    out = {k: v for k, v in d.items() if k not in DROP}
    if name.startswith("gammatone"):
        out["x"] = d["x"]  # the unit impulse: a few bytes compressed
        out["gt_impulse"] = d["gt_impulse"][..., keep]
    for k in FRONT_END:
        if k in d:
            out[k] = d[k][..., keep]
    out["t_index"] = stored[keep].astype(np.int32)
    if int(d["t_stride_mod"]):
        stored_mod = np.arange(0, int(d["n_samples_covered_mod"]), int(d["t_stride_mod"]))
        keep_mod = np.arange(0, len(stored_mod), MOD_THIN[fs])
        for k in MODULATION:
            if k in d:
                out[k] = d[k][..., keep_mod]
        out["t_index_mod"] = stored_mod[keep_mod].astype(np.int32)
    return out


def _loudness(d: dict, model: str, name: str) -> dict:
    x = loudness_stimulus(name)
    ref = d["x_pa"] if d["x_pa"].ndim == 1 else d["x_pa"][:, 0]
    if d["x_pa"].ndim == 2 and not np.array_equal(d["x_pa"][:, 0], d["x_pa"][:, 1]):
        raise ValueError(f"{model}_{name}: the stored stimulus is not diotic")
    dev = np.abs(x - ref).max() / np.abs(ref).max()
    if x.shape != ref.shape or dev > STIMULUS_RTOL:
        raise ValueError(f"{model}_{name}: re-made stimulus differs from the stored one ({dev})")
    keep = GLASBERG_KEEP if model == "glasberg2002" else MOORE_KEEP
    out = {k: d[k] for k in keep}
    if model == "moore2016":
        frames = np.arange(0, len(d["frame_index"]), SPEC_THIN)
        out["inst_spec_all"] = d["inst_spec_all"][frames]
        out["inst_spec_all_frames"] = frames.astype(np.int32)
    return out, dev


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("reference", type=Path, help="the full reference set (with loudness/)")
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "reference")
    a = p.parse_args(argv)
    (a.out / "loudness").mkdir(parents=True, exist_ok=True)
    total = 0

    def save(rel: str, arrays: dict) -> None:
        nonlocal total
        path = a.out / rel
        np.savez_compressed(path, **arrays)
        total += path.stat().st_size
        print(f"{rel:40s} {path.stat().st_size / 1e3:8.1f} kB")

    for fs in (16000, 44100):
        save(f"inputs_fs{fs}.npz", _load(a.reference / f"inputs_fs{fs}.npz"))
        save(
            f"gammatone_impulse_fs{fs}.npz",
            _casp(_load(a.reference / f"gammatone_impulse_fs{fs}.npz"), "gammatone"),
        )
    for name in CASP:
        d = _load(a.reference / name)
        inputs = _load(a.reference / f"inputs_fs{int(d['fs'])}.npz")
        if not np.array_equal(d["x"], inputs[str(d["signal"])]):
            raise ValueError(f"{name}: x is not the stored input {d['signal']}")
        save(name, _casp(d, name))
    for model in ("glasberg2002", "moore2016"):
        for name in LOUDNESS_STIMULI:
            arrays, dev = _loudness(
                _load(a.reference / "loudness" / f"{model}_{name}.npz"), model, name
            )
            print(f"  stimulus {name}: max |re-made - stored| / max |stored| = {dev:.1e}")
            save(f"loudness/{model}_{name}.npz", arrays)
    print(f"total {total / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
