"""Every model on CUDA equals the same model on the CPU: a training step (outputs, the input
gradient and every learnable parameter's gradient; the operators' CUDA kernels forward and
backward through whole models) and inference (the fused chains' Triton kernels:
``casp_samples_`` for Dau1997/Osses2021, ``paulick_frontend`` for Paulick2024), float64 to
1e-9, float32 inference to float32 resolution (the CPU's float32 kernels take float32
shortcuts in the limiter)."""

from __future__ import annotations

import pytest
import torch

import lhotse_amt

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
    pytest.mark.gpu,
]

D = torch.float64
#: model, constructor arguments, input shape
CASES = {
    "Dau1997": (dict(fs=16000, flow=500.0, fhigh=4000.0), (2, 6000)),
    "Osses2021": (dict(fs=16000, flow=500.0, fhigh=4000.0), (2, 6000)),
    "King2019": (dict(fs=16000, flow=500.0, fhigh=4000.0), (2, 6000)),
    "Paulick2024": (dict(fs=44100, flow=500.0, fhigh=4000.0), (1, 8820)),
    "Glasberg2002": (dict(fs=32000), (1, 6400)),
    "Moore2016": (dict(fs=32000), (1, 2, 6400)),
}


def _step(model: torch.nn.Module, x: torch.Tensor) -> tuple[list, torch.Tensor, dict]:
    xx = x.clone().requires_grad_(True)
    out = model(xx)
    out = list(out) if isinstance(out, (list, tuple)) else [out]
    sum(
        (o * torch.linspace(0.5, 1.5, o.shape[-1], dtype=D, device=o.device)).square().mean()
        for o in out
    ).backward()
    grads = {n: p.grad.detach().cpu() for n, p in model.named_parameters() if p.grad is not None}
    return [o.detach().cpu() for o in out], xx.grad.detach().cpu(), grads


def _close(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    scale = b.abs().max().item()
    err = (a - b).abs().max().item() / max(scale, 1e-300)
    assert torch.isfinite(a).all() and err <= 1e-9, (what, err)


@pytest.mark.parametrize("name", sorted(CASES))
def test_training_step_on_cuda_matches_cpu(name):
    kwargs, shape = CASES[name]
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(*shape, generator=gen, dtype=D)
    x = x * (0.02 if name in ("Glasberg2002", "Moore2016") else 0.01)
    x[..., shape[-1] // 3 :] *= 20  # an onset
    cpu = getattr(lhotse_amt, name)(**kwargs, learnable=True, dtype=D)
    gpu = getattr(lhotse_amt, name)(**kwargs, learnable=True, dtype=D)
    gpu.load_state_dict(cpu.state_dict())
    gpu = gpu.cuda()
    out_c, gx_c, gp_c = _step(cpu, x)
    out_g, gx_g, gp_g = _step(gpu, x.cuda())
    assert len(out_c) == len(out_g)
    for i, (a, b) in enumerate(zip(out_g, out_c)):
        _close(a, b, f"output {i}")
    _close(gx_g, gx_c, "input gradient")
    assert gp_c and gp_g.keys() == gp_c.keys()
    for k in gp_c:
        _close(gp_g[k], gp_c[k], f"gradient of {k}")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("name", sorted(CASES))
def test_inference_on_cuda_matches_cpu(name, dtype):
    kwargs, shape = CASES[name]
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(*shape, generator=gen, dtype=torch.float64)
    x = x * (0.02 if name in ("Glasberg2002", "Moore2016") else 0.01)
    x[..., shape[-1] // 3 :] *= 20
    x = x.to(dtype)
    cpu = getattr(lhotse_amt, name)(**kwargs, dtype=dtype)
    gpu = getattr(lhotse_amt, name)(**kwargs, dtype=dtype).cuda()
    with torch.inference_mode():
        out_c, out_g = cpu(x), gpu(x.cuda())
    out_c = list(out_c) if isinstance(out_c, (list, tuple)) else [out_c]
    out_g = list(out_g) if isinstance(out_g, (list, tuple)) else [out_g]
    assert len(out_c) == len(out_g)
    # float32: the CPU's fused kernels run every recursion in float64; on CUDA Paulick2024's
    # front end runs as the float32 per-stage operators (the CPU's two paths differ by
    # 3e-4 there too: float32 rounding in the DRNL's low-frequency sections)
    tol = 1e-9 if dtype == torch.float64 else 1e-3 if name == "Paulick2024" else 1e-4
    for i, (a, b) in enumerate(zip(out_g, out_c)):
        assert a.dtype == b.dtype and a.shape == b.shape, (i, a.shape, b.shape)
        scale = b.double().abs().max().item()
        err = (a.cpu().double() - b.double()).abs().max().item() / max(scale, 1e-300)
        assert torch.isfinite(a).all() and err <= tol, (i, err)
