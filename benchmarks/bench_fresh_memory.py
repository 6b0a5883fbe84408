"""What a model forward's sample-rate output costs the operating system on this machine.

A model forward returns a sample-rate tensor (Osses2021, 10 s at 44.1 kHz: 0.5 GB per
item, 4 GB for a batch of 8); its pages are faulted in as the kernels write them, and
the cost lands in system time. This script touches a fresh tensor of that size twice:
right after an equal tensor was freed, and after the freed memory sat idle for a few
seconds. On a VM whose kernel reports free pages to the host (virtio-balloon free page
reporting; see ``page_reporting`` on the kernel command line) the second case pays the
host's page faults again, which is where the batch-8 forward's extra system time came
from before the package's host cache (``lhotse_amt._alloc``) kept freed outputs for the
next call; on other machines both cases cost about the same. The tensors here come from
PyTorch's allocator directly, not from the host cache.

    python benchmarks/bench_fresh_memory.py [--gb 0.5 4] [--idle 5]
"""

from __future__ import annotations

import argparse
import os
import time

import _settings  # noqa: F401  (huge pages, host cache: before any tensor is made)
import torch

import lhotse_amt  # noqa: F401


def touch(gb: float) -> tuple[float, float]:
    """User and system seconds to allocate and fill ``gb`` GB of float32."""
    t0 = os.times()
    t = torch.empty(int(gb * 2**30) // 4)
    t.fill_(1.0)
    t1 = os.times()
    del t
    return t1.user - t0.user, t1.system - t0.system


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, nargs="+", default=[0.5, 4.0])
    ap.add_argument("--idle", type=float, default=5.0)
    args = ap.parse_args()
    cmdline = open("/proc/cmdline").read() if os.path.exists("/proc/cmdline") else ""
    print("free page reporting on the kernel command line:", "page_reporting" in cmdline)
    print(f"{'GB':>5} {'case':<26} {'user s':>7} {'sys s':>7} {'sys s/GB':>9}")
    for gb in args.gb:
        touch(gb)  # the process has grown to this size once
        for case, idle in (("reused at once", 0.0), (f"after {args.idle:g} s idle", args.idle)):
            time.sleep(idle)
            u, s = touch(gb)
            print(f"{gb:>5g} {case:<26} {u:>7.3f} {s:>7.3f} {s / gb:>9.3f}")


if __name__ == "__main__":
    main()
