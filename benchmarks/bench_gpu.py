"""Throughput on a CUDA device: features (``extract_batch``) and forward + backward.

Two tables, each at batch 1, 8 and 64 (``--batches``):

* **features**: every registered extractor with ``device="cuda"``, ``extract_batch`` on a
  list of ``B`` signals of ``--seconds`` seconds of noise at 65 dB SPL at the extractor's
  native rate (Moore2016: two-channel, diotic; loudness models in pascals), numpy in and
  numpy out (host-to-device copies and the return to the host are counted). Figure:
  seconds of audio per wall-clock second (×real time), median of ``--reps`` after one
  warm-up call (Triton compiles on it), and the peak of allocated GPU memory of one call.
* **training**: each model with ``learnable=True`` on the GPU in float32, one step of
  forward, loss (mean square of every output) and backward on a ``(B, T)`` batch (2 s at
  16 kHz; Paulick2024 1 s at 44.1 kHz; Glasberg2002/Moore2016 1 s at 32 kHz in pascals),
  ×real time as above and the peak GPU memory of a step per second of audio.
* **launches** (``--launches``): the CUDA kernels (and device copies) that one
  ``extract_batch`` of 8 items starts, counted by the profiler (CUPTI) for items of 1 s
  and of 4 s: equal counts mean that the launches do not grow with the signal's length.

A CPU column gives the same figures for batch 8 on all of the machine's cores in the same
run (``--no-cpu`` skips it), so the two are read side by side. Timings synchronise the
device before reading the host clock. ``--json PATH`` writes every figure.

    python benchmarks/bench_gpu.py [--models amt-dau1997 ...] [--batches 1 8 64]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch
from lhotse.features.base import FEATURE_EXTRACTORS

import lhotse_amt  # registers the extractors

MODELS = {
    "amt-dau1997": "Dau1997",
    "amt-osses2021": "Osses2021",
    "amt-king2019": "King2019",
    "amt-paulick2024": "Paulick2024",
    "amt-glasberg2002": "Glasberg2002",
    "amt-moore2016": "Moore2016",
}
LOUDNESS = ("Glasberg2002", "Moore2016")


def noise(n: int, fs: int, seconds: float, channels: int, pascals: bool, seed: int) -> np.ndarray:
    """``(n, [channels,] T)`` float32 noise at 65 dB SPL (rms 1 = 100 dB, or pascals)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, int(fs * seconds))).astype(np.float32)
    x *= 20e-6 * 10 ** (65 / 20) if pascals else 10 ** ((65 - 100) / 20)
    return np.repeat(x[:, None], 2, axis=1) if channels == 2 else x


def timed(fn, reps: int, device: str) -> tuple[float, float]:
    """Median wall seconds of ``fn()`` over ``reps`` calls after one warm-up, and the peak
    GPU memory (MB) of one call (0 on the CPU)."""
    fn()
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t)
    peak = (torch.cuda.max_memory_allocated() - base) / 2**20 if device == "cuda" else 0.0
    return statistics.median(times), peak


def features(name: str, batch: int, seconds: float, reps: int, device: str) -> dict:
    cls = FEATURE_EXTRACTORS[name]
    conf = cls.config_type()
    if hasattr(conf, "diotic"):
        conf.diotic = True
    conf.device = device
    ex = cls(conf)
    fs = conf.sampling_rate
    loud = MODELS[name] in LOUDNESS
    x = noise(batch, fs, seconds, cls.input_channels, loud, seed=batch)
    items = list(x)
    wall, peak = timed(lambda: ex.extract_batch(items, fs), reps, device)
    return dict(xrt=batch * seconds / wall, wall=wall, peak_mb=peak)


def launches(name: str, seconds: float, batch: int = 8) -> dict:
    """CUDA-side events (kernels, copies, memsets) of one ``extract_batch`` of ``batch``
    items of ``seconds``, after a warm-up call; the most frequent kernel names too."""
    from torch.profiler import ProfilerActivity, profile

    cls = FEATURE_EXTRACTORS[name]
    conf = cls.config_type()
    if hasattr(conf, "diotic"):
        conf.diotic = True
    conf.device = "cuda"
    ex = cls(conf)
    fs = conf.sampling_rate
    x = noise(batch, fs, seconds, cls.input_channels, MODELS[name] in LOUDNESS, seed=1)
    items = list(x)
    ex.extract_batch(items, fs)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        ex.extract_batch(items, fs)
        torch.cuda.synchronize()
    names: dict[str, int] = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            names[e.name] = names.get(e.name, 0) + 1
    return dict(n=sum(names.values()), names=dict(sorted(names.items(), key=lambda kv: -kv[1])))


def training(model_name: str, batch: int, reps: int, device: str) -> dict:
    loud = model_name in LOUDNESS
    fs = 44100 if model_name == "Paulick2024" else 32000 if loud else 16000
    seconds = 2.0 if fs == 16000 else 1.0
    model = getattr(lhotse_amt, model_name)(fs=fs, learnable=True).to(device)
    x = torch.from_numpy(
        noise(batch, fs, seconds, 2 if model_name == "Moore2016" else 1, loud, seed=batch)
    ).to(device)

    def step() -> None:
        xx = x.clone().requires_grad_(True)
        out = model(xx)
        out = list(out) if isinstance(out, (list, tuple)) else [out]
        sum(o.square().mean() for o in out).backward()
        model.zero_grad(set_to_none=True)

    wall, peak = timed(step, reps, device)
    return dict(xrt=batch * seconds / wall, wall=wall, peak_mb_per_s=peak / (batch * seconds))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--batches", nargs="*", type=int, default=[1, 8, 64])
    ap.add_argument("--seconds", type=float, default=4.0, help="length of a feature item")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-cpu", action="store_true", help="skip the CPU batch-8 column")
    ap.add_argument("--no-training", action="store_true")
    ap.add_argument("--no-features", action="store_true")
    ap.add_argument("--launches", action="store_true", help="count CUDA launches (1 s, 4 s)")
    ap.add_argument("--json", help="write all figures here")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_gpu.py needs a CUDA device")
    print(
        f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} CPU threads",
        flush=True,
    )
    res: dict = {
        "device": torch.cuda.get_device_name(),
        "features": {},
        "training": {},
        "launches": {},
    }

    def cell(kind: str, key: tuple[str, str], fn, *fn_args) -> None:
        try:
            r = fn(*fn_args)
        except Exception as e:  # report and go on: one failing row must not lose the table
            r = dict(error=f"{type(e).__name__}: {e}"[:300])
        res[kind].setdefault(key[0], {})[key[1]] = r
        print(kind, key, json.dumps(r), flush=True)

    for name in [] if args.no_features else args.models:
        for b in args.batches:
            cell(
                "features", (name, f"cuda-{b}"), features, name, b, args.seconds, args.reps, "cuda"
            )
        if not args.no_cpu:
            cell("features", (name, "cpu-8"), features, name, 8, args.seconds, 1, "cpu")
    if not args.no_training:
        for name in args.models:
            m = MODELS[name]
            for b in args.batches:
                cell("training", (m, f"cuda-{b}"), training, m, b, args.reps, "cuda")
            if not args.no_cpu:
                cell("training", (m, "cpu-8"), training, m, 8, 1, "cpu")

    for name in args.models if args.launches else []:
        for sec in (1.0, 4.0):
            cell("launches", (name, f"{sec:g} s"), launches, name, sec)

    cols = [f"cuda-{b}" for b in args.batches] + ([] if args.no_cpu else ["cpu-8"])

    def table(kind: str, title: str, first: str, peak: str, peak_name: str) -> None:
        if not res[kind]:
            return
        print(f"\n{title}")
        print(f"| {first} | " + " | ".join(cols) + f" | {peak_name} |")
        for name, row in res[kind].items():
            cells = ["-" if row.get(c) is None else "error" if "error" in row[c]
                     else f"{row[c]['xrt']:.0f}" for c in cols]  # fmt: skip
            last = row.get(f"cuda-{args.batches[-1]}") or {}
            print(f"| {name} | " + " | ".join(cells) + f" | {last.get(peak, float('nan')):.0f} |")

    table("features", "features, x real time (peak GPU MB at the largest batch)", "extractor",
          "peak_mb", "peak MB")  # fmt: skip
    table("training", "forward + backward, x real time (peak GPU MB per s of audio, largest "
          "batch)", "model", "peak_mb_per_s", "MB per s")  # fmt: skip
    if res["launches"]:
        print("\nCUDA launches per extract_batch (8 items)")
        print("| extractor | 1 s | 4 s |")
        for name, row in res["launches"].items():
            cells = [str(row.get(k, {}).get("n", "error")) for k in ("1 s", "4 s")]
            print(f"| {name} | " + " | ".join(cells) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
