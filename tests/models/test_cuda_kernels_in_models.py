"""The CUDA kernels inside whole models, without a GPU: in Triton's interpreter
(``TRITON_INTERPRET=1``, a subprocess) every operator that picks its kernel through
:class:`lhotse_amt.ops.rowop.DeviceKernels` is made to run its CUDA (Triton) kernel on the
CPU tensors, and each model's eager inference must equal its CPU-kernel result. This
checks the CUDA kernels' wiring (arguments, state layouts between stages and chunks,
dtypes) through the same calls a model makes on a GPU: Paulick2024's ear filter, front end
(DRNL, IHC, adaptation loops, decimator) and modulation bank, streamed in two chunks;
King2019's stage-wise path (the band-pass bank, the broken-stick compression, the phase
insensitivity); Dau1997's stage-wise path (gammatone, IHC, adaptation loops, modulation
bank); float64 to 1e-10 relative. The fused pooled chains, which branch on the device
themselves, have interpreter tests of their own (``tests/kernels/test_triton_pooled.py``).
"""

from __future__ import annotations

import pytest
from triton_interpret import run_interpreted

_SCRIPT = """
import torch
import lhotse_amt
from lhotse_amt.ops.rowop import DeviceKernels

D = torch.float64


def flat(out):
    if isinstance(out, dict):
        return [t for k in sorted(out) for t in flat(out[k])]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in flat(o)]
    return [out] if torch.is_tensor(out) else []


def run():
    g = torch.Generator().manual_seed(0)
    res = {}
    x = torch.randn(1, 700, generator=g, dtype=D) * 0.05
    x[:, 300:] *= 10.0
    m = lhotse_amt.Paulick2024(fs=44100, flow=500.0, fhigh=2000.0, n_channels=3, dtype=D)
    res["paulick"] = flat(m(x))
    out1, st = m.stream(x[:, :333])
    out2, _ = m.stream(x[:, 333:], st)
    res["paulick_stream"] = flat([out1["modulation"], out2["modulation"]])
    y = torch.randn(1, 400, generator=g, dtype=D) * 0.05
    k = lhotse_amt.King2019(fs=16000, flow=800.0, fhigh=1000.0, dtype=D, return_stages=True)
    res["king"] = flat(k(y))
    d = lhotse_amt.Dau1997(fs=16000, flow=500.0, fhigh=1000.0, dtype=D, return_stages=True)
    res["dau"] = flat(d(y))
    return res


with torch.no_grad():
    ref = run()
    used = set()
    cpu_for_device = DeviceKernels.for_device

    def cuda_kernels(self, device_type):
        used.add(self._cuda)
        return cpu_for_device(self, "cuda")

    DeviceKernels.for_device = cuda_kernels
    got = run()
for name in ref:
    assert len(got[name]) == len(ref[name]) > 0, name
    for i, (a, b) in enumerate(zip(got[name], ref[name])):
        assert a.shape == b.shape and a.dtype == b.dtype, (name, i, a.shape, b.shape)
        scale = max(b.abs().max().item(), 1e-300)
        err = (a - b).abs().max().item() / scale
        assert err <= 1e-10, (name, i, err)
for mod in ("triton_paulick", "triton_filterbanks", "triton_sos", "triton_adaptation"):
    assert mod in used, (mod, sorted(used))
print("ok", sorted(used))
"""


def test_models_on_the_cuda_kernels_equal_the_cpu_kernels_in_interpreter():
    pytest.importorskip("triton")
    run_interpreted(_SCRIPT, timeout=900)
