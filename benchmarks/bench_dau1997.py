"""Speed and memory of Dau1997 (model and ``amt-dau1997`` extractor).

Prints a table: real-time factor (wall-clock processing time / audio time, lower is
faster), the same with the process's CPU time (less sensitive to other load on a shared
machine; with several threads it adds their times up) and the peak resident memory of a
fresh process for each configuration. Every row runs in its own subprocess, so the peak
RSS belongs to that row alone: one full-size warm-up call (compiled kernels loaded, the
process's memory grown: a fresh process first faults in its pages, which on a VM that
reports free memory to its host costs up to ~2 s per GB), then the best of ``--reps``
timed calls.

    python benchmarks/bench_dau1997.py            # full table
    python benchmarks/bench_dau1997.py --quick    # 1 s and 10 s only
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import _settings  # noqa: F401  (huge pages, host cache: before any tensor is made)

ROW = r"""
import json, resource, sys, time, torch
import numpy as np
cfg = json.loads(sys.argv[1])
torch.set_num_threads(cfg["threads"])
import lhotse_amt
fs, dur, batch, what = cfg["fs"], cfg["dur"], cfg["batch"], cfg["what"]
rng = np.random.default_rng(0)
x = (rng.standard_normal((batch, int(fs * dur))) * 10 ** ((65 - 100) / 20)).astype(np.float32)
if what == "model":
    m = lhotse_amt.Dau1997(fs)
    xt = torch.from_numpy(x)
    def fn():
        with torch.inference_mode():
            m(xt)
else:
    conf = lhotse_amt.Dau1997Config(sampling_rate=fs, stage=cfg.get("stage", "modulation"))
    ex = lhotse_amt.Dau1997Extractor(conf)
    def fn():
        ex.extract_batch(list(x), fs)
fn()  # warm-up: compiled kernels loaded, caches and the process's memory grown
dt = dc = float("inf")
for _ in range(cfg["reps"]):
    t = time.perf_counter(); c = time.process_time(); fn()
    dt = min(dt, time.perf_counter() - t); dc = min(dc, time.process_time() - c)
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(dict(rtf=dt / (batch * dur), cpu_rtf=dc / (batch * dur), seconds=dt, rss_mb=rss)))
"""


def run(cfg: dict) -> dict:
    env = dict(
        os.environ,
        OMP_NUM_THREADS=str(cfg["threads"]),
        NUMBA_NUM_THREADS=str(max(cfg["threads"], 1)),
    )
    r = subprocess.run(
        [sys.executable, "-c", ROW, json.dumps(cfg)], capture_output=True, text=True, env=env
    )
    if r.returncode != 0:
        return dict(error=r.stderr.strip().splitlines()[-1])
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="only 1 s and 10 s")
    ap.add_argument("--repeat", type=int, default=1, help="processes per row (the best is shown)")
    ap.add_argument("--reps", type=int, default=2, help="timed calls per process (the best)")
    args = ap.parse_args()
    allthreads = os.cpu_count() or 1
    durs = (1, 10) if args.quick else (1, 10, 60)
    rows = []
    for fs in (16000, 44100):
        for dur in durs:
            for batch in (1, 8):
                for threads in sorted({1, allthreads}):
                    what = ["features"]
                    if dur <= 10 and batch == 1:
                        what.insert(0, "model")  # sample-rate output: (B, C, M, T) floats
                    for w in what:
                        cfg = dict(
                            fs=fs, dur=dur, batch=batch, threads=threads, what=w, reps=args.reps
                        )
                        res = [run(cfg) for _ in range(args.repeat)]
                        ok = [r for r in res if "error" not in r]
                        best = min(ok, key=lambda r: r["rtf"]) if ok else res[0]
                        rows.append((cfg, best))
                        print_row(cfg, best, header=len(rows) == 1)


def print_row(cfg: dict, r: dict, header: bool) -> None:
    if header:
        print(
            f"{'what':<10}{'fs':>7}{'audio s':>9}{'batch':>7}{'threads':>9}{'RTF':>9}"
            f"{'x realtime':>12}{'CPU RTF':>9}{'peak RSS MB':>13}"
        )
    if "error" in r:
        print(
            f"{cfg['what']:<10}{cfg['fs']:>7}{cfg['dur']:>9}{cfg['batch']:>7}{cfg['threads']:>9}"
            f"  error: {r['error']}"
        )
        return
    print(
        f"{cfg['what']:<10}{cfg['fs']:>7}{cfg['dur']:>9}{cfg['batch']:>7}{cfg['threads']:>9}"
        f"{r['rtf']:>9.4f}{1 / r['rtf']:>12.0f}{r['cpu_rtf']:>9.4f}{r['rss_mb']:>13.0f}",
        flush=True,
    )


if __name__ == "__main__":
    main()
