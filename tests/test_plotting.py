"""Feature plots: colour-bar units, a diverging map centred at 0 for signed panels and
frequency ticks at octave frequencies on the channel axis."""

from __future__ import annotations

import matplotlib
import numpy as np
import pytest

from lhotse_amt import Dau1997Extractor, Glasberg2002Config, Glasberg2002Extractor
from lhotse_amt.plotting import (
    DIVERGING_CMAP,
    SEQUENTIAL_CMAP,
    feature_units,
    frequency_ticks,
    plot_features,
)

matplotlib.use("Agg")


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


def _image_axes(fig):
    return [ax for ax in fig.axes if ax.images and ax.get_title()]


def _channel_fcs(extractor) -> np.ndarray:
    names = extractor.feature_names()
    return np.array(sorted({float(n.split("fc=")[1].split("Hz")[0]) for n in names if "fc=" in n}))


def test_frequency_ticks_sit_at_octave_frequencies_between_the_right_channels():
    fcs = _channel_fcs(Dau1997Extractor())  # 31 channels, 87 Hz to 7.8 kHz
    pos, labels = frequency_ticks(fcs)
    values = [float(label[:-1]) * 1000 if label.endswith("k") else float(label) for label in labels]
    assert labels[-1] == "4k" and "1k" in labels and "500" in labels
    assert all(fcs[0] <= v <= fcs[-1] for v in values)
    assert np.all(np.diff(pos) >= 0.05 * len(fcs))  # no two ticks on top of each other
    for p, v in zip(pos, values):
        below = int(np.floor(p - 0.5))  # row k is centred at k + 0.5
        assert fcs[below] <= v <= fcs[min(below + 1, len(fcs) - 1)]


def test_frequency_ticks_of_bin_numbers_fall_back_to_the_values():
    pos, labels = frequency_ticks(np.arange(40.0))  # e.g. fbank bins 0..39
    assert labels[0] == "0" and labels[-1] == "39" and len(labels) == 6
    np.testing.assert_allclose(pos[[0, -1]], [0.5, 39.5])
    with pytest.raises(ValueError, match="non-empty 1-D"):
        frequency_ticks(np.zeros((2, 3)))


def test_signed_panels_use_a_diverging_map_centred_at_zero():
    rng = np.random.default_rng(0)
    fcs = [125.0, 250.0, 500.0, 1000.0]
    names = [f"fc={f}Hz/mfc={m}Hz" for f in fcs for m in ("0.00", "16.67")]
    feats = rng.standard_normal((50, len(names))).astype(np.float32)
    feats[:, 1::2] = np.abs(feats[:, 1::2])  # the 16.67-Hz band is non-negative
    fig = plot_features(feats, names, 0.01, feature_type="amt-dau1997")
    signed, positive = _image_axes(fig)
    im = signed.images[0]
    assert im.get_cmap().name == DIVERGING_CMAP
    vmin, vmax = im.get_clim()
    assert vmin == -vmax and vmax == pytest.approx(np.abs(feats[:, 0::2]).max())
    assert positive.images[0].get_cmap().name == SEQUENTIAL_CMAP
    assert positive.images[0].colorbar.ax.get_ylabel() == "model units (MU)"
    assert signed.get_ylabel() == "centre frequency (Hz)"
    assert [t.get_text() for t in signed.get_yticklabels()] == ["125", "250", "500", "1k"]


def test_dau1997_band_pass_modulation_bands_are_signed_in_a_real_plot(tmp_path):
    ex = Dau1997Extractor()
    x = (np.random.default_rng(1).standard_normal((1, 8000)) * 0.02).astype(np.float32)
    feats = ex.extract(x, 16000)
    fig = plot_features(
        feats, ex.feature_names(), ex.frame_shift, tmp_path / "d.png", feature_type=ex.name
    )
    axes = {ax.get_title(): ax for ax in _image_axes(fig)}
    band = axes["modulation band 5.0 Hz"].images[0]  # band-pass output: both signs
    assert band.get_cmap().name == DIVERGING_CMAP
    lo, hi = band.get_clim()
    assert lo == -hi and hi == pytest.approx(np.abs(band.get_array()).max())
    assert (tmp_path / "d.png").stat().st_size > 10_000


def test_loudness_plot_labels_specific_and_total_loudness():
    ex = Glasberg2002Extractor(Glasberg2002Config(include_stl=True, include_ltl=True))
    names = ex.feature_names()
    feats = np.abs(np.random.default_rng(2).standard_normal((30, len(names)))).astype(np.float32)
    fig = plot_features(feats, names, ex.frame_shift, feature_type=ex.name)
    (image,) = _image_axes(fig)
    assert image.images[0].colorbar.ax.get_ylabel() == "specific loudness (sone/Cam)"
    curves = [ax for ax in fig.axes if ax.lines]
    assert [c.get_ylabel() for c in curves] == ["loudness (sone)"]
    assert {line.get_label() for line in curves[0].lines} == {"stl", "ltl"}


def test_units_of_every_registered_extractor_and_bad_input():
    from lhotse.features.base import FEATURE_EXTRACTORS

    for name in (n for n in FEATURE_EXTRACTORS if n.startswith("amt-")):
        image, curve = feature_units(name)
        assert image and curve
    with pytest.raises(ValueError, match="'fbank'"):
        feature_units("fbank")
    with pytest.raises(ValueError, match="3 names"):
        plot_features(np.zeros((5, 4)), ["fc=1Hz", "fc=2Hz", "fc=3Hz"], 0.01)
    with pytest.raises(ValueError, match="frame_shift"):
        plot_features(np.zeros((5, 1)), ["fc=1Hz"], 0.0)
