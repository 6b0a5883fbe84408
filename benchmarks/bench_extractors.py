"""Extractor throughput and memory over a CutSet.

For each extractor: ``CutSet.compute_and_store_features`` on CPU with 1 and 2 worker
processes (real-time factor = wall time / audio duration, peak RSS of the main process and
its children), the peak RSS of one long recording (memory must stay bounded: it grows with
the feature matrix, not with the sample-rate model output), and, when CUDA is available,
``extract_batch`` on the GPU with a full batch.

    python benchmarks/bench_extractors.py                      # amt-dau1997
    python benchmarks/bench_extractors.py -m amt-king2019 -m amt-moore2016
    python benchmarks/bench_extractors.py --long-minutes 60    # the 1-hour memory check
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile

import _settings  # noqa: F401  (huge pages, host cache: before any tensor is made)

JOB = r"""
import json, resource, sys, time, tempfile
from pathlib import Path
import numpy as np, soundfile as sf, torch
cfg = json.loads(sys.argv[1])
import lhotse_amt
from lhotse import CutSet, Recording
from lhotse.features.base import FEATURE_EXTRACTORS
cls = FEATURE_EXTRACTORS[cfg["name"]]
conf = cls.config_type()
if cls.input_channels == 2 and hasattr(conf, "diotic"):
    conf.diotic = True
if cfg.get("device"):
    conf.device = cfg["device"]
ex = cls(conf)
sr = conf.sampling_rate
root = Path(cfg["dir"])
rng = np.random.default_rng(0)

def make(n, seconds):
    cuts = []
    for i in range(n):
        p = root / f"b{i}_{seconds}_{sr}.wav"
        if not p.exists():
            x = rng.standard_normal(int(seconds * sr)) * 10 ** ((65 - 100) / 20)
            sf.write(p, x.astype(np.float32), sr, subtype="FLOAT")
        cuts.append(Recording.from_file(p, recording_id=p.stem).to_cut())
    return CutSet.from_cuts(cuts)

out = {}
if cfg["what"] == "cutset":
    cuts = make(cfg["n"], cfg["seconds"])
    ex.extract(np.zeros(sr // 10, np.float32) + 1e-4, sr)  # compile kernels in this process
    t = time.perf_counter()
    store = tempfile.mkdtemp(dir=root)
    cuts.compute_and_store_features(ex, store, num_jobs=cfg["jobs"], progress_bar=False)
    dt = time.perf_counter() - t
    out = dict(rtf=dt / (cfg["n"] * cfg["seconds"]))
elif cfg["what"] == "long":
    x = (rng.standard_normal(int(cfg["seconds"] * sr)) * 10 ** ((65 - 100) / 20)).astype(np.float32)
    if cls.input_channels == 2 and not getattr(conf, "diotic", False):
        x = np.stack([x, x])
    ex.extract(x[..., : sr // 10], sr)  # compile kernels in this process
    t = time.perf_counter()
    f = ex.extract(x, sr)
    out = dict(rtf=(time.perf_counter() - t) / cfg["seconds"], feature_mb=f.nbytes / 2**20)
elif cfg["what"] == "cuda":
    n = int(cfg["seconds"] * sr)
    x = [torch.from_numpy((rng.standard_normal(n) * 1e-2).astype(np.float32)) for _ in range(cfg["n"])]
    ex.extract_batch(x[:1], sr)
    torch.cuda.synchronize()
    t = time.perf_counter()
    ex.extract_batch(x, sr)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t
    out = dict(rtf=dt / (cfg["n"] * cfg["seconds"]), gpu_mb=torch.cuda.max_memory_allocated() / 2**20)
self_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
child_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
out.update(rss_mb=max(self_rss, child_rss))
print(json.dumps(out))
"""


def run(cfg: dict) -> dict:
    r = subprocess.run([sys.executable, "-c", JOB, json.dumps(cfg)], capture_output=True, text=True)
    if r.returncode != 0:
        return dict(error=(r.stderr.strip().splitlines() or ["?"])[-1])
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("-m", "--model", action="append", help="extractor name(s)")
    ap.add_argument("--cuts", type=int, default=8, help="number of cuts")
    ap.add_argument("--seconds", type=float, default=5.0, help="duration of each cut")
    ap.add_argument("--long-minutes", type=float, default=10.0, help="long recording (minutes)")
    args = ap.parse_args()
    import torch

    names = args.model or ["amt-dau1997"]
    print(f"{'extractor':<18}{'run':<30}{'RTF':>9}{'x realtime':>12}{'peak RSS MB':>13}  note")
    with tempfile.TemporaryDirectory() as d:
        for name in names:
            rows = []
            for jobs in (1, 2):
                cfg = dict(
                    name=name, what="cutset", n=args.cuts, seconds=args.seconds, jobs=jobs, dir=d
                )
                rows.append((f"CutSet {args.cuts}x{args.seconds:g}s, {jobs} job(s)", run(cfg), ""))
            for minutes in sorted({1.0, args.long_minutes}):
                cfg = dict(name=name, what="long", seconds=60 * minutes, dir=d)
                r = run(cfg)
                rows.append(
                    (
                        f"one {minutes:g}-min recording",
                        r,
                        f"features {r.get('feature_mb', 0):.0f} MB",
                    )
                )
            if torch.cuda.is_available():
                cfg = dict(name=name, what="cuda", n=64, seconds=10.0, device="cuda", dir=d)
                r = run(cfg)
                rows.append(("CUDA extract_batch 64x10s", r, f"GPU {r.get('gpu_mb', 0):.0f} MB"))
            else:
                rows.append(("CUDA extract_batch", dict(error="no CUDA device here"), ""))
            for what, r, note in rows:
                if "error" in r:
                    print(f"{name:<18}{what:<30}  {r['error']}")
                else:
                    print(
                        f"{name:<18}{what:<30}{r['rtf']:>9.4f}{1 / r['rtf']:>12.0f}"
                        f"{r['rss_mb']:>13.0f}  {note}",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
