#!/usr/bin/env python
"""Loudness growth of a 1-kHz tone (sone vs level, 20-100 dB SPL) with Glasberg2002 and
Moore2016 against ANSI S3.4-2007 (Table 7) and the sone rule (1 sone at 40 phon, x2 per
10 phon). Writes ``loudness_growth.json``, ``loudness_growth.md`` and
``loudness_growth.png`` to ``--out-dir``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))

from published import (  # noqa: E402
    LOUDNESS_MAX_PHON_ERROR,
    ansi_sone,
    sone_rule,
    sone_to_phon,
)

P0 = 20e-6
FS = 32000


def tone(level_db: float, seconds: float = 0.5, freq: float = 1000.0, ramp: float = 0.01):
    """A 1-kHz tone in pascals (free-field level ``level_db`` dB SPL), raised-cosine ramps."""
    n = int(seconds * FS)
    x = np.sqrt(2) * P0 * 10 ** (level_db / 20) * np.sin(2 * np.pi * freq * np.arange(n) / FS)
    r = int(ramp * FS)
    w = 0.5 * (1 - np.cos(np.pi * np.arange(r) / r))
    x[:r] *= w
    x[-r:] *= w[::-1]
    return x


def steady_loudness(model_name: str, x: np.ndarray) -> float:
    """Short-term loudness (sone) averaged over the steady part (0.2 s to 0.1 s before the
    end), the quantity the steady-state ANSI procedure predicts."""
    from lhotse_amt import Glasberg2002, Moore2016

    t = torch.tensor(x, dtype=torch.float64)
    if model_name == "glasberg2002":
        out = Glasberg2002(dtype=torch.float64).compute(t)
        stl, times = out["stl"].numpy(), out["frame_times_s"].numpy()
    else:
        stl, _, _ = Moore2016(dtype=torch.float64)(torch.stack([t, t]))
        stl = stl.numpy()
        times = np.arange(stl.shape[-1]) / 1000.0
    sel = (times >= 0.2) & (times <= len(x) / FS - 0.1)
    return float(stl[sel].mean())


def run(levels: list[float], out_dir: Path, progress: bool = True) -> dict:
    out_dir.mkdir(parents=True, exist_ok=True)
    models = ("glasberg2002", "moore2016")
    res: dict = {"level_db": list(levels), "ansi_sone": ansi_sone(np.array(levels)).tolist()}
    res["rule_sone"] = sone_rule(np.array(levels)).tolist()
    jobs = [(m, lv) for m in models for lv in levels]
    vals: dict[str, list[float]] = {m: [] for m in models}
    for m, lv in tqdm(jobs, desc="loudness growth", disable=not progress):
        vals[m].append(steady_loudness(m, tone(lv)))
    for m in models:
        s = np.array(vals[m])
        res[m] = {
            "sone": s.tolist(),
            "phon": sone_to_phon(s).tolist(),
            "phon_error": (sone_to_phon(s) - np.array(levels)).tolist(),
        }
    res["checks"] = check(res)
    (out_dir / "loudness_growth.json").write_text(json.dumps(res, indent=1))
    (out_dir / "loudness_growth.md").write_text(table(res))
    plot(res, out_dir / "loudness_growth.png")
    return res


def check(res: dict) -> dict:
    """Loudness-level error (model sone converted to phon with Table 7) within bounds."""
    out = {}
    lv = np.array(res["level_db"])
    for m in ("glasberg2002", "moore2016"):
        err = np.abs(np.array(res[m]["phon_error"]))
        ok = True
        for (lo, hi), tol in LOUDNESS_MAX_PHON_ERROR.items():
            sel = (lv >= lo) & (lv <= hi)
            ok &= bool(np.all(err[sel] <= tol))
        out[m] = {"max_abs_phon_error": float(err.max()), "within_bounds": ok}
    return out


def table(res: dict) -> str:
    rows = [
        "| level (dB SPL) | ANSI S3.4-2007 (sone) | 2^((L-40)/10) | Glasberg2002 (sone) "
        "| Moore2016 (sone) | G2002 error (phon) | M2016 error (phon) |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for i, lv in enumerate(res["level_db"]):
        g, m = res["glasberg2002"], res["moore2016"]
        rows.append(
            f"| {lv:g} | {res['ansi_sone'][i]:.3f} | {res['rule_sone'][i]:.3f} | "
            f"{g['sone'][i]:.3f} | {m['sone'][i]:.3f} | {g['phon_error'][i]:+.1f} | "
            f"{m['phon_error'][i]:+.1f} |"
        )
    return "\n".join(rows) + "\n"


def plot(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lv = np.array(res["level_db"])
    fine = np.linspace(min(lv), max(lv), 200)
    fig, ax = plt.subplots(figsize=(5.5, 4))
    ax.semilogy(fine, ansi_sone(fine), "k-", label="ANSI S3.4-2007 Table 7")
    ax.semilogy(fine, sone_rule(fine), "k:", label="1 sone at 40 phon, x2 / 10 phon")
    ax.semilogy(lv, res["glasberg2002"]["sone"], "o", label="Glasberg2002 (STL)")
    ax.semilogy(lv, res["moore2016"]["sone"], "s", mfc="none", label="Moore2016 (STL)")
    ax.set_xlabel("level of the 1-kHz tone (dB SPL)")
    ax.set_ylabel("loudness (sone)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("Loudness growth of a 1-kHz tone")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out-dir", type=Path, default=Path("exp/perception"))
    p.add_argument("--coarse", action="store_true", help="levels 30, 50, 70, 90 only (tests)")
    args = p.parse_args(argv)
    levels = [30.0, 50.0, 70.0, 90.0] if args.coarse else [float(v) for v in range(20, 101, 5)]
    res = run(levels, args.out_dir)
    print(table(res))
    print(json.dumps(res["checks"], indent=1))


if __name__ == "__main__":
    main()
