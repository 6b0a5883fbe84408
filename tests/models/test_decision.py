"""Decision methods on a CASP model's internal representation (Paulick2024)."""

from __future__ import annotations

import pytest
import torch

from lhotse_amt import Paulick2024

FS = 44100


@pytest.fixture(scope="module")
def model() -> Paulick2024:
    return Paulick2024(FS, flow=500.0, fhigh=2000.0, n_channels=4, dtype=torch.float64)


def _noise(batch: int, seed: int, level: float = 0.01) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, 4410, generator=g, dtype=torch.float64) * level


def test_roi_selection_slices(model: Paulick2024) -> None:
    rep = model(_noise(2, 0))
    roi = model.roi_selection(rep, time_window=(0.02, 0.07), channel_range=(1, 3),
                              modulation_range=(0, 2))  # fmt: skip
    fs = model.fs_resampled
    t0, t1 = int(0.02 * fs), int(0.07 * fs)
    assert len(roi) == 2
    for r, full in zip(roi, rep[1:3], strict=True):
        assert r.shape == (2, 2, t1 - t0)
        torch.testing.assert_close(r, full[:, 0:2, t0:t1], rtol=0, atol=0)
    assert [r.shape for r in model.roi_selection(rep)] == [r.shape for r in rep]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(time_window=(0.05, 0.01)), "time_window"),
        (dict(channel_range=(3, 1)), "channel_range"),
        (dict(channel_range=(9, 12)), "channel_range"),
        (dict(modulation_range=(0, 1.5)), "modulation_range"),
    ],
)
def test_roi_selection_rejects_bad_ranges(model: Paulick2024, kwargs: dict, match: str) -> None:
    rep = model(_noise(1, 1))
    with pytest.raises(ValueError, match=match):
        model.roi_selection(rep, **kwargs)


def test_template_correlation(model: Paulick2024) -> None:
    rep = model(_noise(2, 2))
    other = model(_noise(2, 3))
    torch.testing.assert_close(
        model.template_correlation(rep, rep), torch.ones(2, dtype=rep[0].dtype)
    )
    neg = [-r for r in rep]
    torch.testing.assert_close(
        model.template_correlation(rep, neg), -torch.ones(2, dtype=rep[0].dtype)
    )
    c = model.template_correlation(rep, other)
    assert c.shape == (2,) and bool(((c > -1) & (c < 1)).all())
    raw = model.template_correlation(rep, other, normalize=False)
    want = sum((a * b).sum(dim=(-2, -1)) for a, b in zip(rep, other, strict=True))
    torch.testing.assert_close(raw, want)
    # a batch-1 template serves every item
    one = [r[:1] for r in other]
    torch.testing.assert_close(model.template_correlation(rep, one)[0], c[0])
    with pytest.raises(ValueError, match="template"):
        model.template_correlation(rep, rep[:-1])


def test_decision_variable_metrics(model: Paulick2024) -> None:
    rep = model(_noise(2, 4))
    allx = torch.cat([r.flatten(-2) for r in rep], dim=-1)
    torch.testing.assert_close(model.compute_decision_variable(rep), allx.square().mean(-1).sqrt())
    torch.testing.assert_close(model.compute_decision_variable(rep, "mean"), allx.mean(-1))
    torch.testing.assert_close(model.compute_decision_variable(rep, "max"), allx.amax(-1))
    torch.testing.assert_close(model.compute_decision_variable(rep, "l2"), allx.norm(dim=-1))
    # channel weights: only channel 2 counts
    w = torch.zeros(len(rep), dtype=torch.float64)
    w[2] = 1.0
    only2 = model.compute_decision_variable(rep, channel_weights=w)
    torch.testing.assert_close(only2, rep[2].square().mean(dim=(-2, -1)).sqrt())
    # modulation weights: only band 0 counts
    mw = torch.zeros(max(r.shape[-2] for r in rep), dtype=torch.float64)
    mw[0] = 1.0
    band0 = torch.stack([r[:, 0] for r in rep], dim=1)
    torch.testing.assert_close(
        model.compute_decision_variable(rep, modulation_weights=mw),
        band0.square().mean(dim=(-2, -1)).sqrt(),
    )
    with pytest.raises(ValueError, match="metric"):
        model.compute_decision_variable(rep, "median")
    with pytest.raises(ValueError, match="channel_weights"):
        model.compute_decision_variable(rep, channel_weights=torch.ones(3))
    with pytest.raises(TypeError, match="internal_repr"):
        model.compute_decision_variable(torch.zeros(2, 3, 4))


def test_make_decision(model: Paulick2024) -> None:
    dv = torch.tensor([0.1, 0.5, 0.9])
    assert model.make_decision(dv, 0.4).tolist() == [False, True, True]
    assert model.make_decision(dv, 0.4, "less").tolist() == [True, False, False]
    with pytest.raises(ValueError, match="criterion"):
        model.make_decision(dv, 0.4, "between")


def test_detection_and_discrimination(model: Paulick2024) -> None:
    quiet, loud = _noise(1, 5, 0.001), _noise(1, 5, 0.1)
    dv_quiet = model.detection_task(quiet)
    dv_loud = model.detection_task(loud)
    assert dv_loud.item() > dv_quiet.item()
    thr = 0.5 * (dv_quiet.item() + dv_loud.item())
    dec, dv = model.detection_task(
        torch.cat([quiet, loud]), threshold=thr, return_decision_var=True
    )
    assert dec.tolist() == [False, True]
    torch.testing.assert_close(dv, torch.cat([dv_quiet, dv_loud]))
    # the noise reference is subtracted in the internal representation
    assert model.detection_task(loud, noise_audio=loud).abs().max().item() == 0.0
    assert model.discrimination_task(loud, quiet).tolist() == [True]
    assert model.discrimination_task(loud, quiet, decision_rule="less").tolist() == [False]
    dec, delta = model.discrimination_task(quiet, loud, return_decision_var=True)
    assert dec.tolist() == [False]
    torch.testing.assert_close(delta, dv_quiet - dv_loud)
    with pytest.raises(ValueError, match="decision_rule"):
        model.discrimination_task(loud, quiet, decision_rule="rms")
