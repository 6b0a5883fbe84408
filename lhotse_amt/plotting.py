"""Plots of auditory features (needs matplotlib: ``pip install lhotse_amt[plot]``)."""

from __future__ import annotations

import re
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["plot_features"]

_FC = re.compile(r"fc=([0-9.]+)Hz")
_MFC = re.compile(r"mfc=([0-9.]+|none)")


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
) -> Figure:
    """Plot a ``(frames, features)`` matrix: one image per modulation band (or ear) with
    the auditory channel centre frequency (Hz) on the y axis and time (s) on the x axis;
    scalar columns (e.g. loudness in sone) as curves. Returns the figure; saves a PNG when
    ``path`` is given."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups, scalars = _groups(names)
    n_panels = len(groups) + (1 if scalars else 0)
    ncols = 1 if n_panels <= 3 else 3
    nrows = -(-n_panels // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 2.4 * nrows + 0.6), squeeze=False)
    t_end = features.shape[0] * frame_shift
    for ax, (key, cols) in zip(axes.flat, groups.items()):
        fcs = np.array([c[0] for c in cols])
        data = features[:, [c[1] for c in cols]].T
        order = np.argsort(fcs)
        im = ax.imshow(
            data[order],
            aspect="auto",
            origin="lower",
            extent=(0, t_end, 0, len(order)),
            cmap="magma",
        )
        ticks = np.linspace(0, len(order) - 1, min(6, len(order))).astype(int)
        ax.set_yticks(ticks + 0.5)
        ax.set_yticklabels([f"{fcs[order][k]:.0f}" for k in ticks])
        ax.set_ylabel("channel fc (Hz)")
        ax.set_xlabel("time (s)")
        ax.set_title(key, fontsize=9)
        fig.colorbar(im, ax=ax, pad=0.01)
    if scalars:
        ax = list(axes.flat)[len(groups)]
        t = np.arange(features.shape[0]) * frame_shift
        for i in scalars:
            ax.plot(t, features[:, i], label=names[i])
        ax.set_xlabel("time (s)")
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
