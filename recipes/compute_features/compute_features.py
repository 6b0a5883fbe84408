#!/usr/bin/env python
"""Compute and store auditory-model features for a Lhotse-prepared corpus.

Input: a ``lhotse prepare <corpus>`` output directory (``--manifest-dir``; every
``*recordings*.jsonl.gz`` with its ``*supervisions*.jsonl.gz`` is a split) or one explicit
``--recordings``/``--supervisions`` pair. For every split and every ``--model`` the script
resamples the cuts to the model's rate when needed, computes and stores the features and
writes ``{output_dir}/{model_tag}/cuts_{split}.jsonl.gz`` plus a PNG of a few cuts'
features. Every step is resumable: rerunning after an interruption continues where it
stopped; finished outputs are skipped.

Executors:

* CPU worker processes (default, ``--num-jobs N``): :func:`lhotse_amt.pipeline.extract_cuts`.
* Dask (``--dask``): a local cluster with ``--num-jobs`` worker processes, or the cluster at
  ``--dask-scheduler tcp://host:8786``; the progress log has the same format as the CPU
  path, so a run can switch executors and resume.
* Batches on a device (``--device cuda``, or ``--batch`` on the CPU):
  ``CutSet.compute_and_store_features_batch`` with ``manifest_path`` and
  ``overwrite=False`` (resumes from the manifest it writes).

Examples::

    python recipes/compute_features/compute_features.py \\
        --manifest-dir data/manifests --model amt-dau1997 --model amt-glasberg2002 \\
        --output-dir data/fbank_amt --num-jobs 8
    python recipes/compute_features/compute_features.py --manifest-dir data/manifests \\
        -f my_dau1997.yaml --device cuda --batch-duration 600
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common.manifests import (  # noqa: E402
    cuts_from_manifests,
    find_splits,
    make_extractor,
    spec_tag,
)
from lhotse import CutSet  # noqa: E402
from lhotse.features.base import FeatureExtractor  # noqa: E402
from lhotse.features.io import get_writer  # noqa: E402

from lhotse_amt.pipeline import extract_cuts, partial_manifest_path  # noqa: E402

log = logging.getLogger("compute_features")


def get_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    src = p.add_argument_group("input")
    src.add_argument("--manifest-dir", type=Path, help="`lhotse prepare` output directory")
    src.add_argument("--prefix", default=None, help="only manifests whose name starts with it")
    src.add_argument("--splits", nargs="*", default=None, help="only these splits")
    src.add_argument("--recordings", type=Path, help="explicit recordings manifest")
    src.add_argument("--supervisions", type=Path, help="explicit supervisions manifest")
    src.add_argument("--split-name", default="all", help="split name for --recordings")
    src.add_argument(
        "--trim-to-supervisions",
        action="store_true",
        help="one cut per supervision segment (default: one cut per recording)",
    )
    feats = p.add_argument_group("features")
    feats.add_argument(
        "-m",
        "--model",
        action="append",
        default=[],
        help="extractor, e.g. amt-dau1997 or 'amt-dau1997:stage=adaptation,fhigh=4000' "
        "(repeatable; any registered Lhotse extractor works, e.g. fbank)",
    )
    feats.add_argument(
        "-f", "--feature-config", action="append", default=[], help="extractor YAML (repeatable)"
    )
    feats.add_argument(
        "--storage-type",
        default=None,
        help="default: numpy_files (CPU/Dask) or lilcom_chunky (batches)",
    )
    out = p.add_argument_group("output")
    out.add_argument("--output-dir", type=Path, default=Path("data/features"))
    out.add_argument("--plot-cuts", type=int, default=3, help="cuts shown in the PNG (0: none)")
    ex = p.add_argument_group("executor")
    ex.add_argument("-j", "--num-jobs", type=int, default=1, help="CPU/Dask worker processes")
    ex.add_argument("--dask", action="store_true", help="use Dask (a local cluster by default)")
    ex.add_argument("--dask-scheduler", default=None, help="address of a running Dask scheduler")
    ex.add_argument("--dask-chunk", type=int, default=16, help="cuts per Dask task")
    ex.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1 (cuda implies --batch)")
    ex.add_argument("--batch", action="store_true", help="batched extraction (extract_batch)")
    ex.add_argument("--batch-duration", type=float, default=600.0, help="seconds per batch")
    ex.add_argument("--loader-workers", type=int, default=2, help="audio loading workers")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    args = p.parse_args(argv)
    if args.manifest_dir is None and args.recordings is None:
        p.error("give --manifest-dir or --recordings [--supervisions]")
    if not args.model and not args.feature_config:
        args.model = ["amt-dau1997"]
    if args.device != "cpu":
        args.batch = True
    if args.dask_scheduler:
        args.dask = True
    if args.dask and args.batch:
        p.error("--dask and --batch/--device cuda are alternatives")
    return args


def load_splits(args: argparse.Namespace) -> dict[str, CutSet]:
    if args.recordings is not None:
        pairs = {args.split_name: (args.recordings, args.supervisions)}
    else:
        pairs = find_splits(args.manifest_dir, args.prefix)
    if args.splits:
        missing = set(args.splits) - set(pairs)
        if missing:
            raise SystemExit(f"splits {sorted(missing)} not found; available: {sorted(pairs)}")
        pairs = {k: v for k, v in pairs.items() if k in args.splits}
    out = {}
    for split, (rec, sup) in pairs.items():
        out[split] = cuts_from_manifests(rec, sup, trim=args.trim_to_supervisions)
        log.info("split %s: %d cuts (%s)", split, len(out[split]), rec.name)
    return out


def prepare_extractor(spec: str, cuts: CutSet, device: str) -> FeatureExtractor:
    ex = make_extractor(spec, device=device if device != "cpu" else None)
    cfg = ex.config
    # binaural models on mono corpora: present the signal to both ears
    channels = {c.num_channels for c in cuts.subset(first=20)}
    if getattr(ex, "input_channels", 1) == 2 and channels == {1} and hasattr(cfg, "diotic"):
        if not cfg.diotic:
            log.info("%s: mono corpus, setting diotic=True", ex.name)
            cfg.diotic = True
            ex = type(ex)(cfg)
    return ex


def extract_dask(
    cuts: CutSet,
    extractor: FeatureExtractor,
    storage_path: Path,
    manifest: Path,
    storage_type: str,
    client: object,
    chunk: int,
    progress: bool,
) -> CutSet:
    """Resumable extraction on a Dask cluster (same progress log as ``extract_cuts``)."""
    return extract_cuts(
        cuts,
        extractor,
        storage_path,
        manifest,
        storage_type=storage_type,
        progress_bar=progress,
        executor=client,
        chunk_size=chunk,
    )


def plot_cuts(cuts: CutSet, extractor: FeatureExtractor, path: Path, n: int) -> None:
    """One PNG with the features of the first ``n`` cuts side by side (a gap between)."""
    import numpy as np

    from lhotse_amt.plotting import feature_units, plot_features

    sel = list(cuts.subset(first=n))
    mats = []
    for c in sel:
        f = c.load_features()
        mats += [f, np.full((10, f.shape[1]), np.nan, dtype=f.dtype)]
    feats = np.concatenate(mats[:-1], 0)
    feats = np.where(np.isnan(feats), np.nanmin(feats), feats)
    names = (
        extractor.feature_names()
        if hasattr(extractor, "feature_names")
        else [f"fc={i}Hz" for i in range(feats.shape[1])]  # bins of non-auditory features
    )
    title = f"{extractor.name}: " + ", ".join(c.id for c in sel)
    units = feature_units(extractor.name)[0] if extractor.name.startswith("amt-") else None
    plot_features(feats, names, extractor.frame_shift, path, title, units=units)


def run(args: argparse.Namespace) -> dict[str, dict[str, Path]]:
    splits = load_splits(args)
    specs = list(args.model) + list(args.feature_config)
    client = cluster = None
    if args.dask:
        from dask.distributed import Client, LocalCluster

        if args.dask_scheduler:
            client = Client(args.dask_scheduler)
        else:
            cluster = LocalCluster(
                n_workers=max(1, args.num_jobs), threads_per_worker=1, processes=True
            )
            client = Client(cluster)
        log.info("Dask dashboard: %s", client.dashboard_link)
    written: dict[str, dict[str, Path]] = {}
    try:
        for spec in specs:
            tag = spec_tag(spec)
            for split, cuts in splits.items():
                ex = prepare_extractor(spec, cuts, args.device)
                sr = getattr(ex.config, "sampling_rate", None)  # None: any rate works
                if sr is not None and any(c.sampling_rate != sr for c in cuts):
                    log.info("%s/%s: resampling cuts to %d Hz", tag, split, sr)
                    cuts = cuts.resample(sr)
                out_dir = args.output_dir / tag
                out_dir.mkdir(parents=True, exist_ok=True)
                manifest = out_dir / f"cuts_{split}.jsonl.gz"
                storage = out_dir / f"feats_{split}"
                ex.to_yaml(out_dir / "extractor.yaml")
                t0 = time.perf_counter()
                # worker and Dask runs go through extract_cuts, which verifies a finished
                # output against its recorded settings (and refuses a different config);
                # batch runs are skipped when a complete manifest exists
                if (
                    args.batch
                    and manifest.exists()
                    and not partial_manifest_path(manifest).exists()
                    and len(CutSet.from_file(manifest)) == len(cuts)
                ):
                    log.info("%s/%s: %s exists, skipping", tag, split, manifest)
                    result = CutSet.from_file(manifest)
                elif args.batch:
                    stype = args.storage_type or "lilcom_chunky"
                    result = cuts.compute_and_store_features_batch(
                        ex,
                        storage_path=storage,
                        manifest_path=manifest,
                        batch_duration=args.batch_duration,
                        num_workers=args.loader_workers,
                        storage_type=get_writer(stype),
                        overwrite=False,
                    )
                elif args.dask:
                    result = extract_dask(
                        cuts,
                        ex,
                        storage,
                        manifest,
                        args.storage_type or "numpy_files",
                        client,
                        args.dask_chunk,
                        not args.quiet,
                    )
                else:
                    result = extract_cuts(
                        cuts,
                        ex,
                        storage,
                        manifest,
                        num_jobs=args.num_jobs,
                        storage_type=args.storage_type or "numpy_files",
                        progress_bar=not args.quiet,
                    )
                dt = time.perf_counter() - t0
                result = CutSet.from_file(manifest)
                audio = sum(c.duration for c in result)
                log.info(
                    "%s/%s: %d cuts, %.1f s audio, %.1f s (RTF %.3f) -> %s",
                    tag,
                    split,
                    len(result),
                    audio,
                    dt,
                    dt / max(audio, 1e-9),
                    manifest,
                )
                written.setdefault(tag, {})[split] = manifest
                png = out_dir / f"features_{split}.png"
                if args.plot_cuts > 0 and not png.exists():
                    plot_cuts(result, ex, png, args.plot_cuts)
    finally:
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()
    return written


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    run(get_args(argv))


if __name__ == "__main__":
    main()
