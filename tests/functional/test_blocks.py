"""Building blocks: kernel/reference agreement, gradients, streaming, presets."""

import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from lhotse_amt.functional.adaptation import adaptation_loops
from lhotse_amt.functional.erb import erbspacebw, freq_to_erb
from lhotse_amt.functional.modulation import modulation_center_frequencies
from lhotse_amt.modules import (
    AdaptationLoops,
    GammatoneFilterbank,
    IHCEnvelope,
    ModulationFilterbank,
)


def test_erb_grids():
    g = erbspacebw(80, 8000, basef=1000)
    assert len(g) == 30 and abs(g[12] - 1000) < 1e-9
    assert np.allclose(np.diff(freq_to_erb(g)), 1.0)
    assert len(erbspacebw(80, 8000)) == 31
    with pytest.raises(ValueError):
        erbspacebw(8000, 80)


def test_modulation_centre_frequencies():
    m = modulation_center_frequencies(4000, use_upper_limit=True, max_mfc=1000)
    np.testing.assert_allclose(m[:4], [0, 5, 10, 50 / 3])
    assert m[-1] <= 1000 and m[-1] * 5 / 3 > 1000
    assert len(modulation_center_frequencies(100, use_upper_limit=True)) == 4  # 0, 5, 10, 16.7
    assert len(modulation_center_frequencies(100, max_mfc=150)) == 8


def test_adaptation_backends_agree():
    x = torch.rand(3, 4, 400, dtype=torch.float64) * 0.02
    x[..., 100:200] *= 50  # an onset to exercise the overshoot limitation
    ref = adaptation_loops(x, 16000, backend="torch")
    fast = adaptation_loops(x, 16000, backend="numba")
    assert (ref - fast).abs().max() <= 1e-12 * ref.abs().max()
    # float32 kernel vs float64 reference
    f32 = adaptation_loops(x.float(), 16000, backend="numba")
    assert (f32.double() - ref).abs().max() <= 1e-4 * ref.abs().max()


def test_adaptation_triton_interpreter_matches_reference():
    pytest.importorskip("triton")
    code = (
        "import torch\n"
        "from lhotse_amt.functional.adaptation import adaptation_loops\n"
        "x = torch.rand(3, 40, dtype=torch.float64) * 0.05\n"
        "x[:, 10:] *= 30\n"
        "a = adaptation_loops(x, 16000, backend='triton')\n"
        "b = adaptation_loops(x, 16000, backend='torch')\n"
        "assert (a - b).abs().max() <= 1e-12 * b.abs().max(), (a - b).abs().max()\n"
        "s = adaptation_loops(x.float(), 16000, backend='triton')\n"
        "assert (s.double() - b).abs().max() <= 1e-4 * b.abs().max()\n"
        "print('ok')\n"
    )
    env = dict(os.environ, TRITON_INTERPRET="1")
    r = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-2000:]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.gpu
def test_adaptation_triton_cuda_matches_numba():
    x = torch.rand(8, 31, 4000) * 0.05
    a = adaptation_loops(x.cuda(), 16000).cpu()
    b = adaptation_loops(x, 16000, backend="numba")
    assert (a - b).abs().max() <= 1e-4 * b.abs().max()


def test_adaptation_streaming_and_limit_presets():
    x = torch.rand(2, 1000, dtype=torch.float64) * 0.01
    full = adaptation_loops(x, 16000)
    a, s = adaptation_loops(x[:, :333], 16000, return_state=True)
    b = adaptation_loops(x[:, 333:], 16000, state=s)
    assert torch.allclose(torch.cat([a, b], -1), full, rtol=0, atol=1e-12)
    m5 = AdaptationLoops(16000, preset="osses2021", dtype=torch.float64)
    m10 = AdaptationLoops(16000, preset="dau1997", dtype=torch.float64)
    step = torch.cat([torch.zeros(1, 800), torch.full((1, 800), 0.1)], -1).double()
    assert m5(step).max() < m10(step).max()  # stronger overshoot limitation
    silence = m10(torch.zeros(1, 500, dtype=torch.float64))
    assert silence.abs().max() < 1e-9  # silence maps to 0 MU


def _gradcheck(fn, *inputs):
    return torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-5, rtol=1e-3)


def test_gradcheck_gammatone():
    gt = GammatoneFilterbank(8000, fc=[500.0, 1500.0], learnable=True, dtype=torch.float64)
    x = torch.randn(40, dtype=torch.float64, requires_grad=True)
    assert _gradcheck(
        lambda x, fc, s: __import__("lhotse_amt").functional.gammatone.gammatone(x, fc, 8000, 4, s),
        x,
        gt.fc,
        gt.erb_scale,
    )


def test_gradcheck_ihc():
    ihc = IHCEnvelope(8000, method="breebaart2001", learnable=True, dtype=torch.float64)
    x = (torch.rand(30, dtype=torch.float64) - 0.3).requires_grad_(True)
    from lhotse_amt.functional.ihc import ihc_envelope

    assert _gradcheck(lambda x, sos: ihc_envelope(x, sos), x, ihc.sos)


def test_gradcheck_adaptation():
    x = (torch.rand(2, 25, dtype=torch.float64) * 0.05 + 0.01).requires_grad_(True)
    tau = torch.tensor([0.005, 0.05, 0.129, 0.253, 0.5], dtype=torch.float64, requires_grad=True)
    assert _gradcheck(lambda x, t: adaptation_loops(x, 1000, t, limit=10.0), x, tau)


def test_gradcheck_modulation():
    mfb = ModulationFilterbank(
        2000, [800.0], learnable=True, dtype=torch.float64, preset="jepsen2008"
    )
    x = torch.randn(1, 30, dtype=torch.float64, requires_grad=True)
    from lhotse_amt.functional.modulation import modulation_filterbank

    def f(x, p, g):
        return modulation_filterbank(
            x, mfb.lp_sos, p, g, mfb.direct, mfb.use_abs, mfb.scale, mfb.prefilter_sos
        )

    assert _gradcheck(f, x, mfb.poles, mfb.gains)


def test_butterworth_modulation_filters_pass_their_band():
    fs = 4000
    mfb = ModulationFilterbank(fs, [4000.0], filter_type="butterworth", dtype=torch.float64)
    efi = ModulationFilterbank(fs, [4000.0], dtype=torch.float64)
    t = torch.arange(4 * fs, dtype=torch.float64) / fs
    for k, mf in enumerate(mfb.mfc[0].tolist()):
        if mf <= 10:
            continue
        x = torch.sin(2 * math.pi * mf * t)[None, None]
        yb = mfb.forward_padded(x)[0, 0, k, -fs:]
        ye = efi.forward_padded(x)[0, 0, k, -fs:]
        # envelope of a tone at the band centre: |H(mfc)| = 2 (6 dB emphasis), times 1/1 att
        assert abs(float(yb.mean()) - float(ye.mean())) / float(ye.mean()) < 0.02


def test_learnable_modules_have_parameters():
    from lhotse_amt import Dau1997

    m = Dau1997(16000, learnable=True)
    names = {n for n, _ in m.named_parameters()}
    assert {"filterbank.fc", "ihc.sos", "adaptation.tau", "modulation.poles"} <= names
    assert sum(p.numel() for p in Dau1997(16000).parameters()) == 0
