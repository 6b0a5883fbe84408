"""Forward + backward cost of the sample-rate models (a training step's model part).

For each model: CPU seconds per second of audio (CPU time of the calling thread,
``time.thread_time``, one torch thread, float32, learnable model, 2 s of noise at 65 dB SPL
at 16 kHz; Paulick2024 1 s at 44.1 kHz; the loudness models Glasberg2002 and Moore2016
(diotic) 1 s in pascals at 32 kHz), for the forward and the backward (loss: mean square of
every output), best of ``--reps`` after a warm-up step, and the ratio backward / forward.

**torch_amt side by side.** Where ``torch_amt`` is installed (``pip install --no-deps
torch-amt==0.2.0``: a benchmark-only install, never a dependency of the project), the same
model class of torch_amt runs the same signal with the same settings (``learnable=True``,
float32, one thread, input gradient) in its own process, and the table gives its forward +
backward and our speed-up (torch_amt's total / ours). torch_amt imports ``torchaudio`` at
import time; without it that process gets a stand-in ``torchaudio.transforms.Resample``
(the polyphase resampler of :mod:`lhotse_amt.functional.resample`; only torch_amt's
Paulick2024 resamples). torch_amt runs one step without warm-up (its cost is Python work
per sample, minutes per model): ``--torch-amt-reps`` repeats it, ``--torch-amt-seconds``
shortens its signal (the figures stay per second of audio; its cost is linear in the
length), ``--no-torch-amt`` skips it.

**Peak memory of a training step** (MB per second of audio): a fresh process builds the
model, runs a short warm-up step (kernels loaded, lazy initialisation done), releases the
host cache and resets the kernel's high-water mark of the resident set
(``/proc/self/clear_refs``, :mod:`benchmarks._rss`), then runs one step of forward,
loss and backward; the figure is that step's high-water mark minus the resident set
before it, divided by the audio duration. It counts every allocation of the step (torch
tensors, the autograd graph's saved tensors, the kernels' scratch), not the interpreter,
the libraries or the model's parameters. Without ``clear_refs`` (not Linux) the column
reads ``-``.

**Inference side by side** (``--inference``): the forward without autograd of the models
with fixed coefficients (the extractors' path: fused CPU kernels), same signals, CPU
seconds per second of audio, best of ``--reps``; ``--ref PATH`` runs the same rows with
the package found at ``PATH`` (e.g. ``git archive HEAD | tar -x -C /tmp/base``) in the
same call, one process per row and tree, alternating, and prints both and their ratio.
For A/B claims across trees use ``farm-bench`` paired runs of ``--inference --models X``.

    python benchmarks/bench_training.py [--models Dau1997 ...] [--reps 3]
    python benchmarks/bench_training.py --torch-amt-seconds 0.5
    python benchmarks/bench_training.py --inference [--ref /tmp/base]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import _settings  # noqa: F401  (huge pages, host cache: inherited by the timed processes)

SETUP = r"""
import json, os, sys, time, torch
cfg = json.loads(sys.argv[1])
torch.set_num_threads(1)
name = cfg["name"]
loud = name in ("Glasberg2002", "Moore2016")
fs = 44100 if name == "Paulick2024" else 32000 if loud else 16000
dur = cfg.get("seconds") or (1.0 if name == "Paulick2024" or loud else 2.0)

def signal(seconds):
    x = torch.randn(1, int(fs * seconds), generator=torch.Generator().manual_seed(0))
    x = x * 10 ** ((65 - 100) / 20)  # 65 dB SPL, rms 1 = 100 dB
    if loud:  # pascals, 65 dB SPL; Moore2016 takes (B, 2, T)
        x = x * (20e-6 * 10 ** (65 / 20) / x.std())
        x = x.expand(2, -1)[None] if name == "Moore2016" else x
    return x

def step(model, x):
    xx = x.clone().requires_grad_(True)
    t0 = time.thread_time()
    out = model(xx)
    out = list(out) if isinstance(out, (list, tuple)) else [out]
    loss = sum(o.square().mean() for o in out)
    t1 = time.thread_time()
    loss.backward()
    t2 = time.thread_time()
    return t1 - t0, t2 - t1
"""

OURS = r"""
import lhotse_amt
model = getattr(lhotse_amt, name)(fs=fs, learnable=True)
x = signal(dur)
step(model, x)
best = min((step(model, x) for _ in range(cfg["reps"])), key=sum)
print(json.dumps(dict(fwd=best[0] / dur, bwd=best[1] / dur)))
"""

MEMORY = r"""
import lhotse_amt
sys.path.insert(0, cfg["here"])
import _rss
model = getattr(lhotse_amt, name)(fs=fs, learnable=True)
step(model, signal(0.1))
x = signal(dur)
if not _rss.reset_peak():
    print(json.dumps(dict(mb=None)))
    sys.exit()
with open("/proc/self/status") as f:
    base = next(int(l.split()[1]) for l in f if l.startswith("VmRSS:")) / 1024.0
step(model, x)
print(json.dumps(dict(mb=(_rss.peak_rss_mb() - base) / dur)))
"""

TORCH_AMT = r"""
import types
try:
    import torchaudio  # noqa: F401
except ImportError:  # stand-in: torch_amt imports torchaudio.transforms at import time
    import torch.nn
    from lhotse_amt.functional.resample import rational_factors, resample_poly

    class Resample(torch.nn.Module):
        def __init__(self, orig_freq, new_freq, **kwargs):
            super().__init__()
            self.up, self.down = rational_factors(orig_freq, new_freq)

        def forward(self, v):
            return resample_poly(v, self.up, self.down)

    ta = types.ModuleType("torchaudio")
    ta.transforms = types.ModuleType("torchaudio.transforms")
    ta.transforms.Resample = Resample
    sys.modules["torchaudio"] = ta
    sys.modules["torchaudio.transforms"] = ta.transforms
import torch_amt
model = getattr(torch_amt, name)(fs=fs, learnable=True)
x = signal(dur)
best = min((step(model, x) for _ in range(cfg["reps"])), key=sum)
print(json.dumps(dict(fwd=best[0] / dur, bwd=best[1] / dur, seconds=dur)))
"""

INFERENCE = r"""
import lhotse_amt
model = getattr(lhotse_amt, name)(fs=fs)
x = signal(dur)
with torch.no_grad():
    model(x)
    best = float("inf")
    for _ in range(cfg["reps"]):
        t0 = time.thread_time()
        model(x)
        best = min(best, time.thread_time() - t0)
print(json.dumps(dict(fwd=best / dur, file=lhotse_amt.__file__)))
"""

TARGET = {
    "Dau1997": 0.1,
    "Osses2021": 0.1,
    "King2019": 0.1,
    "Paulick2024": 0.5,
    "Glasberg2002": None,
    "Moore2016": None,
}
#: models that torch_amt 0.2.0 has under the same name
TORCH_AMT_MODELS = ("Dau1997", "Osses2021", "King2019", "Paulick2024", "Glasberg2002", "Moore2016")
HERE = os.path.dirname(os.path.abspath(__file__))


def _run(job: str, cfg: dict, pythonpath: str | None = None) -> dict | str:
    """Run one job in a fresh process: its JSON result, or the last error line."""
    env = dict(os.environ)
    # the package of this script's tree unless another is named (first on the path: the
    # child runs in the benchmarks folder, so the working directory adds no package)
    tree = pythonpath if pythonpath is not None else os.path.dirname(HERE)
    env["PYTHONPATH"] = tree + os.pathsep + env.get("PYTHONPATH", "")
    cfg = dict(cfg, here=HERE)
    res = subprocess.run(
        [sys.executable, "-c", SETUP + job, json.dumps(cfg)],
        capture_output=True,
        text=True,
        env=env,
        cwd=HERE,
    )
    if res.returncode != 0:
        lines = res.stderr.strip().splitlines() or [f"exit code {res.returncode}"]
        return lines[-1]
    return json.loads(res.stdout.strip().splitlines()[-1])


def _have_torch_amt() -> bool:
    res = subprocess.run(
        [sys.executable, "-c", "import importlib.util as u; print(u.find_spec('torch_amt'))"],
        capture_output=True,
        text=True,
    )
    return res.returncode == 0 and res.stdout.strip() != "None"


def training(args: argparse.Namespace) -> None:
    with_ta = not args.no_torch_amt and _have_torch_amt()
    print(
        "| model | forward | backward | total | target | backward / forward "
        "| torch_amt forward | torch_amt backward | torch_amt total | speed-up "
        "| step peak MB per s |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    notes = []
    for name in args.models:
        r = _run(OURS, dict(name=name, reps=args.reps))
        if isinstance(r, str):
            print(f"| {name} | failed: {r} |||||||||")
            continue
        tot = r["fwd"] + r["bwd"]
        mem = _run(MEMORY, dict(name=name))
        mb = "-" if isinstance(mem, str) or mem["mb"] is None else f"{mem['mb']:.0f}"
        ta_cells = ["-"] * 4
        if with_ta and name in TORCH_AMT_MODELS:
            cfg = dict(name=name, reps=args.torch_amt_reps, seconds=args.torch_amt_seconds)
            t = _run(TORCH_AMT, cfg)
            if isinstance(t, str):
                ta_cells = [f"failed: {t}", "", "", ""]
            else:
                ttot = t["fwd"] + t["bwd"]
                ta_cells = [
                    f"{t['fwd']:.2f}",
                    f"{t['bwd']:.2f}",
                    f"{ttot:.2f}",
                    f"{ttot / tot:.0f}x" if ttot >= 10 * tot else f"{ttot / tot:.2f}x",
                ]
                if args.torch_amt_seconds and not notes:
                    notes.append(f"torch_amt ran on the first {t['seconds']:g} s of the signal")
        print(
            f"| {name} | {r['fwd']:.3f} | {r['bwd']:.3f} | {tot:.3f} | {TARGET.get(name) or '-'} "
            f"| {r['bwd'] / r['fwd']:.1f} | " + " | ".join(ta_cells) + f" | {mb} |"
        )
    if not with_ta:
        notes.append(
            "torch_amt not installed (pip install --no-deps torch-amt==0.2.0) or skipped: "
            "no side-by-side columns"
        )
    for n in notes:
        print(f"\nNote: {n}")


def inference(args: argparse.Namespace) -> None:
    trees = [("this tree", None)] + ([(args.ref, args.ref)] if args.ref else [])
    head = " | ".join(t for t, _ in trees)
    ratio = " | this / ref" if args.ref else ""
    print(f"| model | {head}{ratio} |")
    print("|---|" + "---:|" * (len(trees) + bool(args.ref)))
    for name in args.models:
        best: list[float | None] = [None] * len(trees)
        for _ in range(args.rounds):  # alternate the trees: a drifting machine hits both
            for i, (_, path) in enumerate(trees):
                r = _run(INFERENCE, dict(name=name, reps=args.reps), pythonpath=path)
                if isinstance(r, dict):
                    if path is not None and not r["file"].startswith(os.path.abspath(path)):
                        raise SystemExit(f"--ref: the package came from {r['file']}, not {path}")
                    best[i] = r["fwd"] if best[i] is None else min(best[i], r["fwd"])
        cells = ["failed" if b is None else f"{b:.4f}" for b in best]
        if args.ref and None not in best:
            cells.append(f"{best[0] / best[1]:.2f}")
        print(f"| {name} | " + " | ".join(cells) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(TARGET))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-torch-amt", action="store_true", help="skip torch_amt")
    ap.add_argument("--torch-amt-reps", type=int, default=1)
    ap.add_argument("--torch-amt-seconds", type=float, default=None)
    ap.add_argument("--inference", action="store_true", help="forward without autograd")
    ap.add_argument("--ref", default=None, help="--inference: package tree to compare with")
    ap.add_argument("--rounds", type=int, default=2, help="--inference: processes per row")
    args = ap.parse_args()
    for k in ("reps", "torch_amt_reps", "rounds"):
        if getattr(args, k) < 1:
            ap.error(f"--{k.replace('_', '-')} must be >= 1, got {getattr(args, k)}")
    if args.torch_amt_seconds is not None and not args.torch_amt_seconds > 0:
        ap.error(f"--torch-amt-seconds must be > 0, got {args.torch_amt_seconds}")
    unknown = [m for m in args.models if m not in TARGET]
    if unknown:
        ap.error(f"unknown model(s) {unknown}; choose from {list(TARGET)}")
    if args.ref and not os.path.isdir(os.path.join(args.ref, "lhotse_amt")):
        ap.error(f"--ref {args.ref!r} has no lhotse_amt package folder")
    inference(args) if args.inference else training(args)


if __name__ == "__main__":
    main()
