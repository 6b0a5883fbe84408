"""Forward + backward cost of the sample-rate models (a training step's model part).

For each model: CPU seconds per second of audio (process time, one thread, float32,
learnable model, 2 s of noise at 65 dB SPL at 16 kHz; Paulick2024 1 s at 44.1 kHz; the
loudness models Glasberg2002 and Moore2016 (diotic) 1 s in pascals at 32 kHz), for the
forward and the backward (loss: mean square of every output), best of ``--reps`` after a
warm-up, and the peak RSS of the step. Each model runs in its own process.

    python benchmarks/bench_training.py [--models Dau1997 ...] [--reps 3]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

JOB = r"""
import json, resource, sys, time, torch, lhotse_amt
torch.set_num_threads(1)
name, reps = sys.argv[1], int(sys.argv[2])
loud = name in ("Glasberg2002", "Moore2016")
fs = 44100 if name == "Paulick2024" else 32000 if loud else 16000
dur = 1.0 if name == "Paulick2024" or loud else 2.0
model = getattr(lhotse_amt, name)(fs=fs, learnable=True)
x = torch.randn(1, int(fs * dur), generator=torch.Generator().manual_seed(0))
x = x * (2 ** 0.5 * 10 ** ((65 - 100) / 20) / 2 ** 0.5)
if loud:  # pascals, 65 dB SPL; Moore2016 takes (B, 2, T)
    x = x * (20e-6 * 10 ** (65 / 20) / x.std())
    x = x.expand(2, -1)[None] if name == "Moore2016" else x
def step():
    xx = x.clone().requires_grad_(True)
    t0 = time.process_time()
    out = model(xx)
    out = list(out) if isinstance(out, (list, tuple)) else [out]
    loss = sum(o.square().mean() for o in out)
    t1 = time.process_time()
    loss.backward()
    t2 = time.process_time()
    return t1 - t0, t2 - t1
step()
best = min((step() for _ in range(reps)), key=sum)
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(dict(fwd=best[0] / dur, bwd=best[1] / dur, rss=rss, dur=dur)))
"""

TARGET = {
    "Dau1997": 0.1,
    "Osses2021": 0.1,
    "King2019": 0.1,
    "Paulick2024": 0.5,
    "Glasberg2002": None,
    "Moore2016": None,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(TARGET))
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    print("| model | forward s/s | backward s/s | total s/s | target | peak RSS MB per s |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in args.models:
        res = subprocess.run(
            [sys.executable, "-c", JOB, name, str(args.reps)], capture_output=True, text=True
        )
        if res.returncode != 0:
            print(f"| {name} | failed: {res.stderr.strip().splitlines()[-1]} |||||")
            continue
        r = json.loads(res.stdout.strip().splitlines()[-1])
        tot = r["fwd"] + r["bwd"]
        print(
            f"| {name} | {r['fwd']:.3f} | {r['bwd']:.3f} | {tot:.3f} | {TARGET.get(name) or '-'} "
            f"| {r['rss'] / r['dur']:.0f} |"
        )


if __name__ == "__main__":
    main()
