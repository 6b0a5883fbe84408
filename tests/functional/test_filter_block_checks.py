"""Input checks of the filter blocks (IIR filters, gammatone, IHC, adaptation loops,
modulation filterbank): each bad input raises an error that names the problem."""

import math

import pytest
import torch

from lhotse_amt.functional.adaptation import adaptation_loops
from lhotse_amt.functional.gammatone import gammatone
from lhotse_amt.functional.ihc import ihc_envelope, ihc_lowpass_sos
from lhotse_amt.functional.iir import one_pole_cascade, sosfilt
from lhotse_amt.functional.modulation import design_modulation_bank, modulation_filterbank

SOS = torch.tensor([[0.2, 0.4, 0.2, 1.0, -0.5, 0.3]], dtype=torch.float64)


def _nan_signal():
    x = torch.randn(2, 100, dtype=torch.float64)
    x[0, 5] = math.nan
    return x


@pytest.mark.parametrize(
    "call",
    [
        lambda x: sosfilt(x, SOS),
        lambda x: one_pole_cascade(x, torch.tensor(0.5 + 0.1j), torch.tensor(1.0), 2),
        lambda x: gammatone(x, torch.tensor([1000.0]), 16000),
        lambda x: ihc_envelope(x, torch.from_numpy(ihc_lowpass_sos(16000, 1000.0))),
        lambda x: adaptation_loops(x, 16000),
    ],
    ids=["sosfilt", "one_pole_cascade", "gammatone", "ihc_envelope", "adaptation_loops"],
)
def test_non_finite_and_integer_signals_are_refused(call):
    with pytest.raises(ValueError, match="NaN or inf"):
        call(_nan_signal())
    with pytest.raises(ValueError, match="integer PCM"):
        call(torch.zeros(2, 100, dtype=torch.int16))
    with pytest.raises(TypeError, match="torch.Tensor"):
        call([0.0, 1.0])


def test_filter_coefficients_are_checked():
    x = torch.randn(1, 50, dtype=torch.float64)
    with pytest.raises(ValueError, match="sos must be finite"):
        sosfilt(x, SOS * math.inf)
    with pytest.raises(ValueError, match="shape"):
        sosfilt(x, SOS[:, :5])
    with pytest.raises(ValueError, match="inside the unit circle"):
        one_pole_cascade(x, torch.tensor(1.0 + 0.5j), torch.tensor(1.0), 1)
    with pytest.raises(ValueError, match="order must be an integer"):
        one_pole_cascade(x, torch.tensor(0.5 + 0j), torch.tensor(1.0), 0)


def test_adaptation_settings_are_checked():
    x = torch.rand(1, 50, dtype=torch.float64)
    with pytest.raises(ValueError, match="fs"):
        adaptation_loops(x, 0)
    with pytest.raises(ValueError, match="tau"):
        adaptation_loops(x, 16000, tau=(0.005, -0.05))
    with pytest.raises(ValueError, match="limit"):
        adaptation_loops(x, 16000, limit=math.nan)


def test_gammatone_rate_and_modulation_shapes_are_checked():
    with pytest.raises(ValueError, match="fs"):
        gammatone(torch.randn(1, 50), torch.tensor([1000.0]), -16000)
    d = design_modulation_bank(16000, [500.0, 1000.0])
    t = {k: torch.as_tensor(getattr(d, k)) for k in ("lp_sos", "poles", "gains", "direct")}
    use_abs, scale = torch.as_tensor(d.use_abs), torch.as_tensor(d.scale)
    x = torch.rand(1, 3, 200, dtype=torch.float64)  # 3 channels, the bank has 2
    with pytest.raises(ValueError, match="C = 3 channels"):
        modulation_filterbank(x, t["lp_sos"], t["poles"], t["gains"], t["direct"], use_abs, scale)
