"""Run a script with the Triton kernels in Triton's CPU interpreter (``TRITON_INTERPRET=1``).

The interpreter is chosen when a kernel is defined (at import), so the script runs in a
subprocess: the setting stays out of the test process."""

from __future__ import annotations

import os
import subprocess
import sys


def run_interpreted(script: str, timeout: float = 600.0) -> None:
    """Run ``script`` in a fresh interpreter with ``TRITON_INTERPRET=1``; assert that it
    exits cleanly and prints ``ok``."""
    env = dict(os.environ, TRITON_INTERPRET="1")
    r = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=timeout
    )
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-3000:]
