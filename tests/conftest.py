import os
from pathlib import Path

import numpy as np
import pytest
import torch

REFERENCE = Path(
    os.environ.get(
        "LHOTSE_AMT_REFERENCE", Path(__file__).resolve().parents[2] / "shared" / "reference"
    )
)


def load_reference(name: str) -> dict:
    """Load one reference ``.npz``; 0-d arrays become Python scalars (README section 7)."""
    path = REFERENCE / name
    if not path.exists():
        pytest.skip(f"reference data not found: {path}")
    with np.load(path, allow_pickle=False) as z:
        d = {k: z[k] for k in z.files}
    return {k: (v.item() if v.ndim == 0 else v) for k, v in d.items()}


def pick(y, d, mod=False):
    y = np.asarray(y)[d["channel_index"]]
    if mod:
        return y[..., : d["n_samples_covered_mod"] : d["t_stride_mod"]]
    return y[..., : d["n_samples_covered"] : d["t_stride"]]


def rel_err(yours, ref):
    return float(np.max(np.abs(np.asarray(yours, np.float64) - ref)) / np.max(np.abs(ref)))


@pytest.fixture(autouse=True)
def _torch_seed():
    torch.manual_seed(0)
    np.random.seed(0)
