"""Peak resident set size of one benchmark row (Linux: the high-water mark is reset
before the row, ``/proc/self/clear_refs``; elsewhere the process peak so far)."""

from __future__ import annotations

import gc
import resource

import _settings  # noqa: F401  (huge pages, host cache: the figures' settings)


def reset_peak() -> bool:
    """Start a new row: collect garbage, release the host cache (blocks kept from earlier
    rows would count against this one) and reset the high-water mark. False where the
    mark cannot be reset (the figures are then the process peak so far)."""
    import lhotse_amt

    gc.collect()
    lhotse_amt.empty_host_cache()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss_mb() -> float:
    """Peak RSS (MB) since :func:`reset_peak` (the process peak where it could not reset)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
