"""Compile the CPU kernels of extractors ahead of time (``lhotse-amt amt warmup``).

A process's first extract compiles the numba kernels it needs (seconds of CPU time per
model) unless numba's on-disk cache already holds them: next to the package sources
where that directory is writable, else in the user's cache directory (``~/.cache/numba``),
or in ``NUMBA_CACHE_DIR`` when that is set. :func:`warmup` runs each extractor once on
a short noise signal, and a batch of two items, so that the cache holds everything
feature extraction with that configuration needs; run it when building a container
image or before starting a pool of workers (with the same ``NUMBA_CACHE_DIR`` and CPU as
the workers: numba's cache entries are per CPU model).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from lhotse.features.base import FEATURE_EXTRACTORS, FeatureExtractor

__all__ = ["amt_extractor_names", "kernel_cache_dir", "warmup"]


def amt_extractor_names() -> list[str]:
    """Names of the registered ``amt-*`` extractors, sorted."""
    import lhotse_amt  # noqa: F401  registers them

    return sorted(n for n in FEATURE_EXTRACTORS if n.startswith("amt-"))


def kernel_cache_dir() -> Path:
    """Directory numba caches this package's compiled kernels in (for this process's
    ``NUMBA_CACHE_DIR`` and permissions)."""
    from .kernels.agc import _agc_kernel

    return Path(_agc_kernel._cache._cache_path)


def _noise(ex: FeatureExtractor, seconds: float) -> np.ndarray:
    sr = int(ex.config.sampling_rate)
    channels = int(getattr(ex, "input_channels", 1))
    rng = np.random.default_rng(0)
    return (0.02 * rng.standard_normal((channels, max(1, int(seconds * sr))))).astype(np.float32)


def warmup(
    extractors: Sequence[str | FeatureExtractor] | None = None,
    seconds: float = 1.0,
) -> list[tuple[str, float]]:
    """Compile (or load from numba's cache) every CPU kernel that ``extractors`` need.

    Args:
        extractors: registered names (``"amt-dau1997"``) or configured extractors (their
            configuration decides which kernels run); ``None``: every ``amt-*`` extractor
            with its default configuration.
        seconds: length of the noise signal each one extracts (s, > 0).

    Returns:
        ``(name, cpu_seconds)`` per extractor: the process CPU time its warm-up took
        (compilation where the cache was empty, a load otherwise).
    """
    if not (isinstance(seconds, (int, float)) and 0 < seconds < float("inf")):
        raise ValueError(f"seconds must be a finite number > 0, got {seconds!r}")
    if extractors is None:
        extractors = amt_extractor_names()
    built: list[FeatureExtractor] = []
    for e in extractors:
        if isinstance(e, FeatureExtractor):
            built.append(e)
        elif isinstance(e, str):
            if e not in FEATURE_EXTRACTORS:
                raise ValueError(
                    f"unknown extractor {e!r}; registered amt-* extractors: "
                    f"{', '.join(amt_extractor_names())}"
                )
            built.append(FEATURE_EXTRACTORS[e]())
        else:
            raise TypeError(f"extractors must be names or FeatureExtractor objects, got {e!r}")
    out = []
    for ex in built:
        t0 = time.process_time()
        sr = int(ex.config.sampling_rate)
        x = _noise(ex, seconds)
        ex.extract(x, sr)
        ex.extract_batch([x, x[:, : max(1, x.shape[1] // 2)]], sampling_rate=sr)
        out.append((ex.name, time.process_time() - t0))
    return out
