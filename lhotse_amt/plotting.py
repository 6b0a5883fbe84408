"""Plots of auditory features (needs matplotlib: ``pip install lhotse_amt[plot]``).

One image per modulation band (or ear) with the auditory channels' centre frequencies on
the y axis (ticks at the octave frequencies 125 Hz, 250 Hz, ..., 8 kHz, placed by the
channels' centre frequencies) and time on the x axis. Each colour bar names the feature's
unit (:func:`feature_units`). Panels with negative values (the band-pass modulation bands,
adaptation-loop undershoots) use a diverging colour map centred at 0 with symmetric limits,
so 0 (silence for every ``amt-*`` feature) is white and the sign can be read off; panels
with no negative values use a sequential map.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["feature_units", "frequency_ticks", "plot_features"]

_FC = re.compile(r"fc=([0-9.]+)Hz")
_MFC = re.compile(r"mfc=([0-9.]+|none)")

_MU = "model units (MU)"
_SPECIFIC = "specific loudness (sone/Cam)"
#: feature type -> (unit of the per-channel columns, unit of the scalar columns)
_UNITS: dict[str, tuple[str, str]] = {
    "amt-dau1997": (_MU, _MU),
    "amt-osses2021": (_MU, _MU),
    "amt-paulick2024": (_MU, _MU),
    "amt-king2019": ("compressed units (AMT level scale)", "compressed units"),
    "amt-glasberg2002": (_SPECIFIC, "loudness (sone)"),
    "amt-moore2016": (_SPECIFIC, "loudness (sone)"),
}

#: tick candidates on the channel axis (Hz): the octave frequencies of audiology
_OCTAVES = (16.0, 31.5, 63.0, 125.0, 250.0, 500.0, 1000.0, 2000.0, 4000.0, 8000.0, 16000.0)

#: smallest distance between two frequency ticks, as a fraction of the channel axis
_MIN_TICK_GAP = 0.05

#: colour maps: sequential for non-negative panels, diverging (centred at 0) for signed ones
SEQUENTIAL_CMAP = "magma"
DIVERGING_CMAP = "RdBu_r"


def feature_units(feature_type: str) -> tuple[str, str]:
    """The units of an ``amt-*`` feature type's columns: ``(channel columns, scalar
    columns)``, e.g. ``("model units (MU)", "model units (MU)")`` for ``amt-dau1997`` and
    ``("specific loudness (sone/Cam)", "loudness (sone)")`` for ``amt-glasberg2002``
    (scalar columns: ``stl``, ``ltl``). Raises ``ValueError`` for other feature types."""
    if feature_type not in _UNITS:
        raise ValueError(
            f"feature_type {feature_type!r} is not an auditory-model feature; "
            f"known: {sorted(_UNITS)}"
        )
    return _UNITS[feature_type]


def _hz_label(f: float) -> str:
    if f >= 1000:
        k = f / 1000
        return f"{k:g}k"
    return f"{f:g}"


def frequency_ticks(fcs: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Ticks for an image whose row ``k`` (spanning ``[k, k + 1)``) shows the channel with
    centre frequency ``fcs[k]`` (Hz, ascending): the octave frequencies (125, 250, ...,
    8000 Hz) that lie within ``fcs``, placed by log-frequency interpolation between the
    channels' centres, labelled ``"125"``, ``"1k"``, ``"8k"`` (Hz); of two ticks closer
    than 5 % of the axis the lower one is left out. With fewer than two
    octave frequencies in range (or values that are not positive and ascending, e.g. bin
    numbers), up to six channels' own values are the ticks. Returns
    ``(positions, labels)``."""
    fcs = np.asarray(fcs, dtype=np.float64)
    if fcs.ndim != 1 or fcs.size == 0:
        raise ValueError(f"fcs must be a non-empty 1-D array, got shape {fcs.shape}")
    centres = np.arange(fcs.size) + 0.5
    monotone = fcs.size > 1 and bool(np.all(fcs > 0)) and bool(np.all(np.diff(fcs) > 0))
    inside = [f for f in _OCTAVES if fcs[0] <= f <= fcs[-1]] if monotone else []
    if len(inside) < 2:
        idx = np.unique(np.linspace(0, fcs.size - 1, min(6, fcs.size)).round().astype(int))
        return centres[idx], [_hz_label(round(float(fcs[k]))) for k in idx]
    pos = np.interp(np.log(inside), np.log(fcs), centres)
    # from the top down, drop a tick closer than 5 % of the axis to the one above it
    keep = [len(inside) - 1]
    for k in range(len(inside) - 2, -1, -1):
        if pos[keep[-1]] - pos[k] >= _MIN_TICK_GAP * fcs.size:
            keep.append(k)
    keep.reverse()
    return pos[keep], [_hz_label(inside[k]) for k in keep]


def _groups(names: list[str]) -> tuple[OrderedDict, list[int]]:
    """Group columns into panels: by modulation band / ear; scalar columns separately."""
    groups: OrderedDict[str, list[tuple[float, int]]] = OrderedDict()
    scalars = []
    for i, n in enumerate(names):
        fc = _FC.search(n)
        if fc is None:
            scalars.append(i)
            continue
        m = _MFC.search(n)
        if m is not None:
            if m.group(1) == "none":
                continue
            key = f"modulation band {float(m.group(1)):.1f} Hz"
        elif "/" in n:
            key = n.split("/")[0]
        else:
            key = "all channels"
        groups.setdefault(key, []).append((float(fc.group(1)), i))
    return groups, scalars


def plot_features(
    features: np.ndarray,
    names: list[str],
    frame_shift: float,
    path: str | Path | None = None,
    title: str = "",
    feature_type: str | None = None,
    units: str | None = None,
) -> Figure:
    """Plot a ``(frames, features)`` matrix whose column ``i`` is named ``names[i]`` (as
    ``AuditoryExtractor.feature_names()``: ``fc=1000.0Hz/mfc=16.67Hz``, ``left/fc=...``,
    ``stl``): one image per modulation band (or ear) with the channel centre frequency (Hz)
    on the y axis and time (s, ``frame_shift`` per frame) on the x axis; scalar columns
    (e.g. loudness in sone) as curves. The colour bars are labelled with ``units`` (default:
    :func:`feature_units` of ``feature_type``, e.g. ``"amt-dau1997"``; neither: "value").
    Signed panels use a diverging map centred at 0. Returns the figure; saves a PNG when
    ``path`` is given."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    features = np.asarray(features)
    if features.ndim != 2 or features.shape[1] != len(names):
        raise ValueError(
            f"features must be (frames, {len(names)}) for {len(names)} names, "
            f"got shape {features.shape}"
        )
    if not frame_shift > 0:
        raise ValueError(f"frame_shift must be > 0 s, got {frame_shift}")
    image_units, curve_units = (
        feature_units(feature_type) if feature_type is not None else ("value", "value")
    )
    if units is not None:
        image_units = curve_units = units
    groups, scalars = _groups(names)
    n_panels = len(groups) + (1 if scalars else 0)
    if n_panels == 0:
        raise ValueError("no column to plot (every column is a padded, absent band)")
    ncols = 1 if n_panels <= 3 else 3
    nrows = -(-n_panels // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 2.4 * nrows + 0.6), squeeze=False)
    t_end = features.shape[0] * frame_shift
    for ax, (key, cols) in zip(axes.flat, groups.items()):
        fcs = np.array([c[0] for c in cols])
        data = features[:, [c[1] for c in cols]].T
        order = np.argsort(fcs)
        data = data[order]
        finite = data[np.isfinite(data)]
        signed = finite.size > 0 and float(finite.min()) < 0
        if signed:
            lim = float(np.abs(finite).max()) or 1.0
            style = dict(cmap=DIVERGING_CMAP, vmin=-lim, vmax=lim)
        else:
            style = dict(cmap=SEQUENTIAL_CMAP)
        im = ax.imshow(
            data, aspect="auto", origin="lower", extent=(0, t_end, 0, len(order)), **style
        )
        pos, labels = frequency_ticks(fcs[order])
        ax.set_yticks(pos)
        ax.set_yticklabels(labels)
        ax.set_ylabel("centre frequency (Hz)")
        ax.set_xlabel("time (s)")
        ax.set_title(key, fontsize=9)
        cb = fig.colorbar(im, ax=ax, pad=0.01)
        cb.set_label(image_units, fontsize=8)
    if scalars:
        ax = list(axes.flat)[len(groups)]
        t = np.arange(features.shape[0]) * frame_shift
        for i in scalars:
            ax.plot(t, features[:, i], label=names[i])
        ax.set_xlabel("time (s)")
        ax.set_ylabel(curve_units)
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[n_panels:]:
        ax.axis("off")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110)
        plt.close(fig)
    return fig
