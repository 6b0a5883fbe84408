#!/usr/bin/env python
"""Speaker-independent isolated-digit recognition (FSDD) in noise: auditory-model features
vs a Kaldi filterbank, clean and multi-condition training.

For each fold (``--test-speakers``: those speakers are used only for testing), the other
speakers' recordings are split per speaker and digit into train and dev (dev: model
selection/early stopping only). Noise (babble of training speakers, speech-shaped noise
with the training speech's long-term spectrum, pink noise, 4-Hz amplitude-modulated
speech-shaped noise) is synthesised into ``EXP/noise`` and mixed into cuts through Lhotse
``MixedCut`` s (``cut.mix(noise, snr=...)``) at 20, 10, 5, 0 and -5 dB SNR; features are
computed from the mixed audio (exact), once per (feature type, cut set), and cached in
``EXP/feats``. The same small CNN is trained for every feature type on clean cuts and on a
multi-condition set (each training/dev cut clean or mixed with a random noise type at 20,
15, 10 or 5 dB, as in Aurora-2), with several seeds, and tested on the held-out speakers
in every condition. Writes ``results.json``, ``results.md`` and ``accuracy.png`` to
``--exp-dir``.

    python recipes/digits/run.py --fsdd-dir ../shared/fsdd --test-speakers george \
        --exp-dir exp/digits
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
from lhotse import CutSet  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402

from digits.classifier import train_and_test  # noqa: E402
from digits.features import (  # noqa: E402
    DEFAULT_FEATURES,
    LEVEL_DB_SPL,
    build_extractor,
    extract_sets,
    recipe_config,
)
from digits.noise import NOISE_TYPES, make_noise_recordings  # noqa: E402
from digits.prepare import prepare_fsdd  # noqa: E402

log = logging.getLogger("digits")

#: test SNRs (dB); results keys are "clean" and f"snr{snr}"
TEST_SNRS = (20, 10, 5, 0, -5)
#: multi-condition training/dev conditions (None: clean), as Aurora-2's multi-condition set
MULTI_SNRS = (None, 20, 15, 10, 5)
#: SNRs averaged for the Aurora-style summary (Aurora-2 averages 0-20 dB)
AURORA_SNRS = (20, 10, 5, 0)
TRAININGS = ("clean", "multi")
#: arguments the cut sets (and so the cached features) depend on
_DATA_KEYS = (
    "fsdd_dir",
    "train_per_digit",
    "dev_per_digit",
    "test_per_digit",
    "data_seed",
    "noise_duration",
    "noise_types",
)


def cond_key(snr: float | None) -> str:
    return "clean" if snr is None else f"snr{snr:g}"


def get_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--fsdd-dir", type=Path, required=True, help="FSDD directory (recordings/)")
    p.add_argument(
        "--test-speakers",
        action="append",
        default=None,
        help="comma-separated speakers held out for testing (one fold); repeat the option "
        "for several folds, or 'each' for every speaker in turn (None: george)",
    )
    p.add_argument("--exp-dir", type=Path, required=True)
    p.add_argument(
        "--features",
        nargs="+",
        default=list(DEFAULT_FEATURES),
        help="feature types NAME[:key=value,...] (the recipe's settings, then these keys)",
    )
    p.add_argument("--noise-types", nargs="+", default=list(NOISE_TYPES), choices=NOISE_TYPES)
    p.add_argument(
        "--train-per-digit",
        type=int,
        default=50,
        help="recordings per training speaker and digit (train + dev; FSDD has 50)",
    )
    p.add_argument("--dev-per-digit", type=int, default=5, help="of those, held out for dev")
    p.add_argument(
        "--test-per-digit", type=int, default=30, help="recordings per test speaker and digit"
    )
    p.add_argument("--seeds", type=int, default=3, help="training seeds per configuration")
    p.add_argument("--data-seed", type=int, default=0, help="subsets, noise and mixing")
    p.add_argument("--epochs", type=int, default=30, help="maximum epochs")
    p.add_argument("--patience", type=int, default=8, help="early stopping on dev accuracy")
    p.add_argument("--channels", type=int, default=64, help="CNN channels")
    p.add_argument(
        "--cmn",
        action="store_true",
        help="per-utterance mean normalisation of every feature type (before the global "
        "mean/variance normalisation)",
    )
    p.add_argument("--noise-duration", type=float, default=30.0, help="s per noise file")
    p.add_argument("-j", "--num-jobs", type=int, default=2, help="worker processes (1: in-process)")
    p.add_argument(
        "--smoke",
        action="store_true",
        help="tiny configuration (~1 minute): 8 (6 + 2 dev) recordings per training speaker "
        "and digit, 3 per test speaker and digit, the first two --noise-types, 1 seed, 12 epochs",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    a = p.parse_args(argv)
    if a.smoke:
        a.train_per_digit, a.dev_per_digit, a.test_per_digit = 8, 2, 3
        a.seeds, a.epochs, a.patience, a.noise_duration = 1, 12, 12, 5.0
        a.noise_types = a.noise_types[:2]
    if a.dev_per_digit < 1 or a.dev_per_digit >= a.train_per_digit:
        raise ValueError(
            f"--dev-per-digit must be >= 1 and < --train-per-digit ({a.train_per_digit}), "
            f"got {a.dev_per_digit}"
        )
    if a.test_per_digit < 1 or a.seeds < 1 or a.epochs < 1:
        raise ValueError("--test-per-digit, --seeds and --epochs must be >= 1")
    for spec in a.features:
        recipe_config(spec)  # unknown names fail here, before any work
    return a


def _folds(arg: list[str] | None, speakers: list[str]) -> list[list[str]]:
    if not arg:
        arg = ["george"]
    folds = []
    for item in arg:
        if item == "each":
            folds.extend([s] for s in speakers)
            continue
        fold = [s.strip() for s in item.split(",") if s.strip()]
        bad = [s for s in fold if s not in speakers]
        if bad or not fold:
            raise ValueError(
                f"--test-speakers {item!r}: unknown speaker(s) {bad}; FSDD has {speakers}"
            )
        if len(fold) >= len(speakers):
            raise ValueError(f"--test-speakers {item!r} leaves no training speaker")
        folds.append(sorted(fold))
    return folds


def _pick(cuts: list, n: int, rng: np.random.Generator) -> list:
    if n > len(cuts):
        raise ValueError(f"asked for {n} recordings per speaker and digit, only {len(cuts)} exist")
    return [cuts[i] for i in sorted(rng.choice(len(cuts), n, replace=False))]


def _mix(cut: Any, noise: Any, snr: float, offset: float) -> Any:
    seg = noise.truncate(offset=offset, duration=cut.duration)
    return cut.mix(seg, snr=snr, preserve_id="left")


def make_fold_manifests(
    cuts: CutSet, test_speakers: list[str], fold_dir: Path, a: argparse.Namespace
) -> dict[str, Path]:
    """Write the cut sets of one fold to ``fold_dir/manifests`` and the noise to
    ``fold_dir/noise``; return ``{set name: manifest}`` (``train-clean``, ``dev-clean``,
    ``train-multi``, ``dev-multi``, ``test-clean``, ``test-{noise}-snr{k}``)."""
    rng = np.random.default_rng([a.data_seed, 17])
    groups: dict[tuple[str, int], list] = {}
    for c in sorted(cuts, key=lambda c: c.id):
        s = c.supervisions[0]
        groups.setdefault((s.speaker, s.custom["digit"]), []).append(c)
    sets: dict[str, list] = {"train-clean": [], "dev-clean": [], "test-clean": []}
    for (spk, _), group in sorted(groups.items()):
        if spk in test_speakers:
            sets["test-clean"] += _pick(group, a.test_per_digit, rng)
        else:
            chosen = _pick(group, a.train_per_digit, rng)
            dev_idx = set(rng.choice(len(chosen), a.dev_per_digit, replace=False).tolist())
            for i, c in enumerate(chosen):
                sets["dev-clean" if i in dev_idx else "train-clean"].append(c)
    fs = sets["train-clean"][0].sampling_rate
    speech = [c.load_audio()[0] for c in sets["train-clean"]]
    noise_dir = fold_dir / "noise"
    # different realisations (seeds) for training/dev and for testing
    noise = {
        "train": make_noise_recordings(
            noise_dir,
            speech,
            fs,
            seed=1000 + a.data_seed,
            tag="train",
            duration=a.noise_duration,
            kinds=tuple(a.noise_types),
        ),
        "test": make_noise_recordings(
            noise_dir,
            speech,
            fs,
            seed=2000 + a.data_seed,
            tag="test",
            duration=a.noise_duration,
            kinds=tuple(a.noise_types),
        ),
    }
    by_kind = {k: {c.recording_id.split("-", 1)[1]: c for c in v} for k, v in noise.items()}

    def offset(c: Any, n: Any) -> float:
        return float(rng.uniform(0.0, max(0.0, n.duration - c.duration - 0.01)))

    for part in ("train", "dev"):
        mixed = []
        for c in sets[f"{part}-clean"]:
            snr = MULTI_SNRS[int(rng.integers(len(MULTI_SNRS)))]
            kind = a.noise_types[int(rng.integers(len(a.noise_types)))]
            n = by_kind["train"][kind]
            mixed.append(c if snr is None else _mix(c, n, snr, offset(c, n)))
        sets[f"{part}-multi"] = mixed
    for kind in a.noise_types:
        n = by_kind["test"][kind]
        offs = [offset(c, n) for c in sets["test-clean"]]  # same segment at every SNR
        for snr in TEST_SNRS:
            sets[f"test-{kind}-{cond_key(snr)}"] = [
                _mix(c, n, snr, o) for c, o in zip(sets["test-clean"], offs)
            ]
    man = fold_dir / "manifests"
    man.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, cs in sets.items():
        paths[name] = man / f"{name}.jsonl.gz"
        CutSet.from_cuts(cs).to_file(paths[name])
    return paths


class _Pool:
    """A spawn process pool, or in-process execution for ``num_jobs <= 1``."""

    def __init__(self, num_jobs: int) -> None:
        self.ex = (
            ProcessPoolExecutor(num_jobs, mp_context=get_context("spawn")) if num_jobs > 1 else None
        )

    def run(self, fn: Any, tasks: list[tuple], desc: str, quiet: bool) -> list:
        bar = tqdm(total=len(tasks), desc=desc, disable=quiet)
        out: list = [None] * len(tasks)
        if self.ex is None:
            for i, t in enumerate(tasks):
                out[i] = fn(*t)
                bar.update()
        else:
            futs = {self.ex.submit(fn, *t): i for i, t in enumerate(tasks)}
            for f in as_completed(futs):
                out[futs[f]] = f.result()
                bar.update()
        bar.close()
        return out

    def close(self) -> None:
        if self.ex is not None:
            self.ex.shutdown()


def _spec_tag(spec: str) -> str:
    return "".join(ch if ch.isalnum() or ch in ".+-" else "_" for ch in spec)


def _loadavg() -> list[float] | None:
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return None


def summarize(runs: list[dict], features: list[str], noise_types: list[str]) -> dict[str, Any]:
    """Accuracy per training condition, feature and test condition: mean over runs (folds
    x seeds) of the mean over noise types, its standard deviation over runs, the per-noise
    breakdown, the Aurora-style 0-20 dB average and the relative error change vs
    ``kaldi-fbank``."""
    conds = ["clean"] + [cond_key(s) for s in TEST_SNRS]
    res: dict[str, Any] = {}
    for tr in TRAININGS:
        acc, std, per_run, noise, aurora, aurora_noise = {}, {}, {}, {}, {}, {}
        for feat in features:
            rs = [r for r in runs if r["feature"] == feat and r["training"] == tr]
            if not rs:
                continue
            vals = {}
            for cond in conds:
                names = (
                    ["test-clean"] if cond == "clean" else [f"test-{k}-{cond}" for k in noise_types]
                )
                vals[cond] = [float(np.mean([r["test"][n] for n in names])) for r in rs]
            acc[feat] = {c: float(np.mean(v)) for c, v in vals.items()}
            std[feat] = {c: float(np.std(v)) for c, v in vals.items()}
            per_run[feat] = vals
            noise[feat] = {
                k: {
                    cond_key(s): float(np.mean([r["test"][f"test-{k}-{cond_key(s)}"] for r in rs]))
                    for s in TEST_SNRS
                }
                for k in noise_types
            }
            aurora[feat] = float(np.mean([acc[feat][cond_key(s)] for s in AURORA_SNRS]))
            aurora_noise[feat] = {
                k: float(np.mean([noise[feat][k][cond_key(s)] for s in AURORA_SNRS]))
                for k in noise_types
            }
        rel = {}
        if "kaldi-fbank" in acc:
            e0 = 1.0 - aurora["kaldi-fbank"]
            c0 = 1.0 - acc["kaldi-fbank"]["clean"]
            for feat in acc:
                e, c = 1.0 - aurora[feat], 1.0 - acc[feat]["clean"]
                rel[feat] = {
                    "aurora_avg": (e - e0) / e0 if e0 > 0 else None,
                    "clean": (c - c0) / c0 if c0 > 0 else None,
                }
        res[tr] = dict(
            accuracy=acc,
            accuracy_std=std,
            accuracy_per_run=per_run,
            accuracy_by_noise=noise,
            aurora_avg=aurora,
            aurora_avg_by_noise=aurora_noise,
            relative_error_change_vs_fbank=rel,
        )
    return res


def write_markdown(path: Path, results: dict[str, Any]) -> None:
    conds = ["clean"] + [cond_key(s) for s in TEST_SNRS]
    cfg = results["config"]
    lines = [
        "# FSDD digits in noise: test accuracy (%) on held-out speakers",
        "",
        f"Test speakers (folds): {', '.join('+'.join(f) for f in cfg['folds'])}; "
        f"{cfg['seeds']} seed(s); noise types {', '.join(cfg['noise_types'])}; "
        f"mean ± std over folds x seeds of the mean over noise types. "
        f"Avg 0-20 = mean of 20, 10, 5, 0 dB (Aurora-2 style). Rel. err. = relative change of "
        f"the avg 0-20 error rate vs kaldi-fbank (negative: fewer errors).",
        "",
    ]
    for tr, title in (("clean", "Clean training"), ("multi", "Multi-condition training")):
        s = results["by_training"][tr]
        if not s["accuracy"]:
            continue
        head = ["features", "dim", "clean", "20 dB", "10 dB", "5 dB", "0 dB", "-5 dB"]
        lines += [f"## {title}", "", "| " + " | ".join(head + ["avg 0-20", "rel. err."]) + " |"]
        lines.append("|" + "---|" * (len(head) + 2))
        for feat, acc in s["accuracy"].items():
            cells = [f"{100 * acc[c]:.1f} ± {100 * s['accuracy_std'][feat][c]:.1f}" for c in conds]
            rel = s["relative_error_change_vs_fbank"].get(feat, {}).get("aurora_avg")
            rel_s = "" if rel is None else f"{100 * rel:+.0f} %"
            dim = results["feature_dims"].get(feat, "")
            lines.append(
                f"| {feat} | {dim} | " + " | ".join(cells) + f" | {100 * s['aurora_avg'][feat]:.1f}"
                f" | {rel_s} |"
            )
        lines += ["", "Avg 0-20 dB by noise type:", ""]
        kinds = cfg["noise_types"]
        lines += ["| features | " + " | ".join(kinds) + " |", "|" + "---|" * (len(kinds) + 1)]
        for feat, d in s["aurora_avg_by_noise"].items():
            lines.append(f"| {feat} | " + " | ".join(f"{100 * d[k]:.1f}" for k in kinds) + " |")
        lines.append("")
    t = results["timing"]
    lines += [
        f"Run time {t['total_s'] / 60:.1f} min (manifests and noise {t['prepare_s']:.0f} s, "
        f"features {t['features_s']:.0f} s, training/testing {t['training_s']:.0f} s) with "
        f"{cfg['num_jobs']} worker process(es); load average at start/end "
        f"{results['machine']['loadavg_start']} / {results['machine']['loadavg_end']} on "
        f"{results['machine']['cpus']} CPU(s).",
        "",
    ]
    path.write_text("\n".join(lines))


def plot(path: Path, results: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    conds = [cond_key(s) for s in TEST_SNRS][::-1] + ["clean"]
    xs = list(range(len(conds)))
    labels = [f"{s}" for s in TEST_SNRS][::-1] + ["clean"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, tr, title in zip(axes, TRAININGS, ("clean training", "multi-condition training")):
        s = results["by_training"][tr]
        for feat, acc in s["accuracy"].items():
            y = [100 * acc[c] for c in conds]
            e = [100 * s["accuracy_std"][feat][c] for c in conds]
            ax.errorbar(xs, y, yerr=e, marker="o", capsize=3, label=feat)
        ax.axhline(10, color="gray", lw=0.8, ls=":")
        ax.set_xticks(xs, labels)
        ax.set_xlabel("SNR (dB)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("test accuracy (%), held-out speakers")
    axes[0].set_ylim(0, 100)
    axes[1].legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(a: argparse.Namespace) -> dict[str, Any]:
    t_start = time.time()
    load_start = _loadavg()
    exp = Path(a.exp_dir)
    exp.mkdir(parents=True, exist_ok=True)
    manifests = prepare_fsdd(a.fsdd_dir, exp / "manifests")
    cuts = CutSet.from_manifests(**manifests).to_eager()
    speakers = sorted({s.speaker for s in manifests["supervisions"]})
    folds = _folds(a.test_speakers, speakers)
    fold_sets = {}
    for fold in folds:
        fold_dir = exp / ("test-" + "+".join(fold))
        fold_sets["+".join(fold)] = (fold_dir, make_fold_manifests(cuts, fold, fold_dir, a))
    t_prep = time.time()
    # what the cached features depend on (besides the feature spec, which names the folder)
    fingerprint = json.dumps({k: str(getattr(a, k)) for k in _DATA_KEYS})

    pool = _Pool(a.num_jobs)
    try:
        # features: one task per (fold, feature, group of sets)
        tasks = []
        for fold_dir, paths in fold_sets.values():
            fp = fold_dir / "feats" / "fingerprint.json"
            if fp.exists() and fp.read_text() != fingerprint:
                import shutil

                shutil.rmtree(fold_dir / "feats")
            (fold_dir / "feats").mkdir(parents=True, exist_ok=True)
            fp.write_text(fingerprint)
            groups = [["train-clean", "dev-clean", "test-clean"], ["train-multi", "dev-multi"]]
            groups += [[n for n in paths if n.startswith(f"test-{k}-")] for k in a.noise_types]
            for spec in a.features:
                fdir = fold_dir / "feats" / _spec_tag(spec)
                for g in groups:
                    jobs = [(str(paths[n]), str(fdir / f"{n}.npz")) for n in g]
                    tasks.append((spec, jobs))
        # longest first (Paulick, Osses, Dau) for a better schedule
        order = {s: i for i, s in enumerate(a.features)}
        tasks.sort(key=lambda t: (-len(t[1]), -order[t[0]]))
        pool.run(extract_sets, tasks, "features", a.quiet)
        t_feat = time.time()

        # training: one task per (fold, feature, training condition, seed)
        ttasks, meta = [], []
        for fold, (fold_dir, paths) in fold_sets.items():
            for spec in a.features:
                fdir = fold_dir / "feats" / _spec_tag(spec)
                tests = {n: str(fdir / f"{n}.npz") for n in paths if n.startswith("test-")}
                for tr in TRAININGS:
                    for seed in range(a.seeds):
                        ttasks.append(
                            (
                                str(fdir / f"train-{tr}.npz"),
                                str(fdir / f"dev-{tr}.npz"),
                                tests,
                                seed,
                                a.epochs,
                                a.patience,
                                32,
                                2e-3,
                                a.channels,
                                1 if a.num_jobs > 1 else 2,
                                a.cmn,
                            )
                        )
                        meta.append(dict(fold=fold, feature=spec, training=tr, seed=seed))
        outs = pool.run(train_and_test, ttasks, "training", a.quiet)
    finally:
        pool.close()
    runs = [dict(**m, **o) for m, o in zip(meta, outs)]
    t_train = time.time()

    by_training = summarize(runs, a.features, a.noise_types)
    dims = {}
    for spec in a.features:
        ex = build_extractor(spec)
        dims[spec] = int(ex.feature_dim(ex.config.sampling_rate))
    results: dict[str, Any] = {
        "accuracy": by_training["clean"]["accuracy"],
        "accuracy_std": by_training["clean"]["accuracy_std"],
        "accuracy_multi": by_training["multi"]["accuracy"],
        "accuracy_multi_std": by_training["multi"]["accuracy_std"],
        "by_training": by_training,
        "feature_dims": dims,
        "feature_configs": {s: dict(zip(("name", "config"), recipe_config(s))) for s in a.features},
        "config": {
            "folds": folds,
            "speakers": speakers,
            "features": a.features,
            "noise_types": a.noise_types,
            "test_snrs": list(TEST_SNRS),
            "multi_condition_snrs": [cond_key(s) for s in MULTI_SNRS],
            "speech_level_db_spl": LEVEL_DB_SPL,
            "train_per_digit": a.train_per_digit,
            "dev_per_digit": a.dev_per_digit,
            "test_per_digit": a.test_per_digit,
            "seeds": a.seeds,
            "epochs": a.epochs,
            "patience": a.patience,
            "channels": a.channels,
            "cmn": a.cmn,
            "data_seed": a.data_seed,
            "num_jobs": a.num_jobs,
            "smoke": a.smoke,
        },
        "runs": runs,
        "timing": {
            "total_s": t_train - t_start,
            "prepare_s": t_prep - t_start,
            "features_s": t_feat - t_prep,
            "training_s": t_train - t_feat,
        },
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "loadavg_start": load_start,
            "loadavg_end": _loadavg(),
        },
    }
    (exp / "results.json").write_text(json.dumps(results, indent=1))
    write_markdown(exp / "results.md", results)
    plot(exp / "accuracy.png", results)
    log.info("wrote %s (%.1f min)", exp / "results.md", (time.time() - t_start) / 60)
    return results


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    a = get_args(argv)
    res = run(a)
    if not a.quiet:
        print((Path(a.exp_dir) / "results.md").read_text())
    else:
        print(json.dumps(res["accuracy"], indent=1))


if __name__ == "__main__":
    main()
