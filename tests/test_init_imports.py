"""``import lhotse_amt`` stays cheap: it registers the ``amt-*`` extractors with Lhotse
without importing scipy.signal (about half a CPU-second) or plotting/Triton modules; the
models design their filters with :func:`lhotse_amt.functional.butter.butter`. Runs in a
fresh interpreter, since modules stay imported for the life of a process."""

from __future__ import annotations

import json
import subprocess
import sys

_CHILD = r"""
import json, sys
import lhotse.features.base as base
import lhotse_amt
heavy = ("scipy.signal", "scipy.stats", "matplotlib", "triton")
print(json.dumps({
    "registered": sorted(k for k in base.FEATURE_EXTRACTORS if k.startswith("amt-")),
    "heavy": [m for m in heavy if m in sys.modules],
}))
"""


def test_import_registers_extractors_without_heavy_modules() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD], capture_output=True, text=True, check=True, timeout=300
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["registered"] == [
        "amt-dau1997",
        "amt-glasberg2002",
        "amt-king2019",
        "amt-moore2016",
        "amt-osses2021",
        "amt-paulick2024",
    ]
    assert result["heavy"] == []


_EXTRACT = r"""
import json, sys
import numpy as np
from lhotse.features.base import FEATURE_EXTRACTORS
import lhotse_amt
heavy = ("scipy.signal", "scipy.interpolate", "scipy.fft", "scipy.stats", "matplotlib", "triton",
         "sympy")
found = {}
for name in sorted(k for k in FEATURE_EXTRACTORS if k.startswith("amt-")):
    ex = FEATURE_EXTRACTORS[name]()
    sr = ex.config.sampling_rate
    x = 0.05 * np.random.default_rng(0).standard_normal((getattr(ex, "input_channels", 1), sr // 4))
    ex.extract(x.astype(np.float32), sr)
    found[name] = [m for m in heavy if m in sys.modules]
print(json.dumps(found))
"""


def test_first_extracts_import_no_heavy_modules() -> None:
    # the extractors' default configurations design and run their filters without
    # scipy.signal / scipy.interpolate / scipy.fft (each a third to a whole CPU-second to
    # import at a first extract), and CPU extraction never imports Triton, nor sympy (torch's
    # symbolic shapes, ~0.2 CPU-s, which torch.broadcast_shapes imports at its first call)
    out = subprocess.run(
        [sys.executable, "-c", _EXTRACT], capture_output=True, text=True, check=True, timeout=1800
    )
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(found) == 6
    assert all(v == [] for v in found.values()), found
