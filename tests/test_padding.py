"""Padding auditory features with silence (lhotse_amt.padding) and what Lhotse does by
default."""

import numpy as np
import pytest
import torch
from corpus import make_cuts
from lhotse import CutSet
from lhotse.features.base import FEATURE_EXTRACTORS
from lhotse.utils import LOG_EPSILON

import lhotse_amt
from lhotse_amt import Dau1997Config, Dau1997Extractor

AMT = [
    "amt-dau1997",
    "amt-osses2021",
    "amt-king2019",
    "amt-paulick2024",
    "amt-glasberg2002",
    "amt-moore2016",
]


@pytest.fixture(scope="module")
def feats(tmp_path_factory) -> CutSet:
    root = tmp_path_factory.mktemp("padding")
    cuts = make_cuts(root / "corpus", n=3, speech=False)  # 0.7, 0.93, 1.16 s
    ex = Dau1997Extractor(Dau1997Config(stage="adaptation"))
    return cuts.compute_and_store_features(ex, root / "feats")


@pytest.mark.parametrize("name", AMT)
def test_pad_value_is_the_extractors_silence(name):
    assert lhotse_amt.pad_value(name) == FEATURE_EXTRACTORS[name].padding_value == 0.0


def test_pad_value_of_other_types_and_bad_names():
    assert lhotse_amt.pad_value("kaldi-fbank") == pytest.approx(LOG_EPSILON)
    with pytest.raises(ValueError, match="unknown feature type 'amt-nope'"):
        lhotse_amt.pad_value("amt-nope")
    with pytest.raises(TypeError, match="feature_type must be a string"):
        lhotse_amt.pad_value(3)


def test_lhotse_default_padding_is_not_silence(feats):
    # what the module documents: a padded cut's features carry LOG_EPSILON, not 0
    c = feats[0]
    f = c.pad(duration=1.5).load_features()
    assert f.shape[0] == 150
    np.testing.assert_allclose(f[c.num_frames + 1 :], LOG_EPSILON, rtol=1e-6)


@pytest.mark.parametrize("direction", ["right", "left", "both"])
def test_pad_cut_fills_silence(feats, direction):
    c = feats[0]
    orig = c.load_features()
    p = lhotse_amt.pad_cut(c, duration=1.5, direction=direction)
    f = p.load_features()
    assert f.shape == (150, orig.shape[1])
    assert np.isfinite(f).all()
    # the original frames are somewhere in the padded matrix, every other frame is 0.0
    k = orig.shape[0]
    starts = [s for s in range(151 - k) if np.allclose(f[s : s + k], orig, atol=1e-4)]
    assert len(starts) == 1
    s = starts[0]
    assert {"right": s == 0, "left": s == 150 - k, "both": 0 < s < 150 - k}[direction]
    rest = np.concatenate([f[:s], f[s + k :]])
    assert rest.size and (rest == 0.0).all()


def test_pad_cuts_pads_every_cut_to_the_longest(feats):
    longest = max(c.num_frames for c in feats)
    out = lhotse_amt.pad_cuts(feats)
    for c, p in zip(feats, out):
        f = p.load_features()
        assert f.shape[0] == longest
        np.testing.assert_allclose(f[: c.num_frames], c.load_features(), atol=1e-4)
        assert (f[c.num_frames :] == 0.0).all()


def test_padding_of_a_real_mix_becomes_silence_through_the_mixing_hooks(feats):
    # a MixedCut with two real tracks is mixed by FeatureMixer through the extractor's
    # hooks, which read Lhotse's padding values as silence: even the default pad works
    a, b = feats[0], feats[1]
    m = a.mix(b, offset_other_by=0.1, snr=10).pad(duration=2.0)
    f = m.load_features()
    n = a.mix(b, offset_other_by=0.1, snr=10).num_frames
    assert f.shape[0] == 200
    assert np.abs(f[n + 1 :]).max() < 1e-4
    assert f.min() > -999.0


def test_collate_features_and_input_strategy(feats):
    x, lens = lhotse_amt.collate_features(feats)
    assert x.shape == (3, int(lens.max()), feats[0].num_features)
    assert lens.tolist() == [c.num_frames for c in feats]
    for i, c in enumerate(feats):
        np.testing.assert_allclose(x[i, : c.num_frames].numpy(), c.load_features(), atol=1e-4)
        assert (x[i, c.num_frames :] == 0.0).all()
    x2, lens2 = lhotse_amt.PrecomputedAuditoryFeatures()(feats)
    torch.testing.assert_close(x2, x)
    assert lens2.tolist() == lens.tolist()
    xl, _ = lhotse_amt.collate_features(feats, pad_direction="left")
    assert (xl[0, : int(lens.max()) - feats[0].num_frames] == 0.0).all()


def test_padding_helpers_reject_bad_input(feats, tmp_path):
    c = feats[0]
    with pytest.raises(ValueError, match="at most one of duration, num_frames"):
        lhotse_amt.pad_cut(c, duration=2.0, num_frames=200)
    with pytest.raises(ValueError, match="pad_cut needs one of"):
        lhotse_amt.pad_cut(c)
    with pytest.raises(ValueError, match="direction must be one of"):
        lhotse_amt.pad_cut(c, duration=2.0, direction="up")
    with pytest.raises(TypeError, match="pad_cut needs a Lhotse Cut"):
        lhotse_amt.pad_cut(np.zeros(3), duration=2.0)
    with pytest.raises(TypeError, match="pad_cuts needs a Lhotse CutSet"):
        lhotse_amt.pad_cuts([c])
    with pytest.raises(ValueError, match="pad_direction must be one of"):
        lhotse_amt.collate_features(feats, pad_direction="middle")
    other = CutSet.from_cuts([feats[1]]).compute_and_store_features(
        lhotse_amt.King2019Extractor(), tmp_path / "k"
    )
    with pytest.raises(ValueError, match="different types"):
        lhotse_amt.pad_cuts(CutSet.from_cuts([c, other[0]]))
    with pytest.raises(ValueError, match="cuts without features"):
        lhotse_amt.collate_features(CutSet.from_cuts([c.drop_features()]))
