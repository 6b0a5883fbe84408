"""Kernel launches per model call do not grow with the signal's length: the recursions run
inside the kernels (one operator call per stage, whatever the number of samples), never as
host loops over samples or blocks.

Launches are counted on the CPU (:mod:`launch_counter`: torch operator calls, which on CUDA
launch kernels, and calls into the numba kernels) for a signal and one 4 times longer, on
three paths of the sample-rate models: eager CPU inference (the fused numba kernels), the
registered operators without gradient (the path CUDA takes; forced here by declaring the
call not to be eager CPU inference) and forward + backward under autograd. The loudness
models (operators without gradient: their no-grad CPU kernels declared not to apply; and
autograd) run frames in chunks of ``chunk_frames`` frames, which bounds their memory and
makes the launches grow with the number of chunks, so they are counted with one chunk
per call.
"""

from __future__ import annotations

import pytest
import torch
from launch_counter import count_launches, growth

import lhotse_amt
from lhotse_amt.models._base import StreamingModel
from lhotse_amt.ops import loudness_fast

SAMPLE_RATE_MODELS = ["Dau1997", "Osses2021", "King2019", "Paulick2024"]
PATHS = ["inference", "operators", "autograd"]


def _model(name: str) -> torch.nn.Module:
    if name == "Paulick2024":
        return lhotse_amt.Paulick2024(fs=44100, n_channels=4)
    return getattr(lhotse_amt, name)(fs=16000, flow=500.0, fhigh=2000.0)


def _loss(out) -> torch.Tensor:
    out = out if isinstance(out, (list, tuple)) else [out]
    return sum(o.square().mean() for o in out)


def _launches(model, x: torch.Tensor, path: str):
    def call():
        if path == "autograd":
            xg = x.clone().requires_grad_(True)
            _loss(model(xg)).backward()
        else:
            with torch.no_grad():
                model(x)

    call()  # compile and cache before counting
    with count_launches() as n:
        call()
    return n


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", SAMPLE_RATE_MODELS)
def test_sample_rate_model_launches_do_not_grow_with_length(name, path, monkeypatch):
    if path == "operators":
        monkeypatch.setattr(StreamingModel, "_eager_inference", lambda self, x, cuda=False: False)
    model = _model(name)
    T = int(model.fs) // 10
    g = torch.Generator().manual_seed(0)
    x = 0.05 * torch.randn(1, 4 * T, generator=g)
    short = _launches(model, x[:, :T], path)
    long = _launches(model, x, path)
    assert sum(short.values()) > 0
    if path == "operators" or path == "autograd":
        # the registered operators ran (the path of CUDA and of training)
        assert any(k.startswith("op:lhotse_amt.") for k in short), sorted(short)
    assert sum(long.values()) <= sum(short.values()), growth(short, long)
    assert not {k: v for k, v in growth(short, long).items() if v[1] > v[0]}


@pytest.mark.parametrize("path", ["operators", "autograd"])
@pytest.mark.parametrize("name", ["Glasberg2002", "Moore2016"])
def test_loudness_model_launches_do_not_grow_with_length(name, path, monkeypatch):
    if path == "operators":
        monkeypatch.setattr(loudness_fast, "fast_path_ok", lambda x, module: False)
    model = getattr(lhotse_amt, name)(chunk_frames=10**6)
    T = int(model.fs) // 40
    g = torch.Generator().manual_seed(0)
    shape = (1, 2, 4 * T) if name == "Moore2016" else (1, 4 * T)
    x = 0.05 * torch.randn(*shape, generator=g)
    short = _launches(model, x[..., :T], path)
    long = _launches(model, x, path)
    assert sum(short.values()) > 0
    assert short == long, growth(short, long)
