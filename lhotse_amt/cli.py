"""``lhotse-amt``: Lhotse's own CLI with the ``amt-*`` extractors registered, plus an
``amt`` command group.

``lhotse-amt feat write-default-config -f amt-dau1997 cfg.yaml``, ``feat extract``,
``feat extract-cuts-batch --device cuda``, ``shar compute-features`` etc. are Lhotse's
commands unchanged (plain ``lhotse`` cannot see plugin extractors), except two drop-in
replacements with the same arguments: ``feat extract-cuts`` resumes an interrupted run and
writes its manifest atomically, and ``feat extract-cuts-batch`` adds ``--device`` and
resumes too (both also in the ``amt`` group).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

import lhotse_amt  # noqa: F401  registers the extractors before Lhotse builds its choices
from lhotse.bin.modes.cli_base import cli
import lhotse.bin.modes  # noqa: F401  attaches feat/shar/... to `cli`
from lhotse.bin.modes.features import feat
from lhotse.features.base import FEATURE_EXTRACTORS, FeatureExtractor
from lhotse.features.io import available_storage_backends


@cli.group(name="amt")
def amt() -> None:
    """Auditory-model commands: list, describe, demo and plot the amt-* extractors, and
    resumable feature extraction."""


def _load_extractor(feature_config: str | None, name: str | None) -> FeatureExtractor:
    if feature_config is not None:
        return FeatureExtractor.from_yaml(feature_config)
    if name is None:
        raise click.UsageError("give a model name or -f CONFIG.yaml")
    if name not in FEATURE_EXTRACTORS:
        raise click.UsageError(f"unknown extractor {name!r}; see `lhotse-amt amt list`")
    return FEATURE_EXTRACTORS[name]()


@amt.command(name="list")
def list_models() -> None:
    """List the auditory-model extractors with their default feature dimensions."""
    rows = []
    for name in sorted(n for n in FEATURE_EXTRACTORS if n.startswith("amt-")):
        ex = FEATURE_EXTRACTORS[name]()
        c = ex.config
        rows.append(
            (
                name,
                c.sampling_rate,
                c.frame_shift,
                ex.feature_dim(c.sampling_rate),
                ex.input_channels,
            )
        )
    click.echo(
        f"{'extractor':<18}{'sampling_rate':>14}{'frame_shift':>12}{'feature_dim':>12}{'channels':>10}"
    )
    for r in rows:
        click.echo(f"{r[0]:<18}{r[1]:>14}{r[2]:>12}{r[3]:>12}{r[4]:>10}")


@amt.command()
@click.argument("name", required=False)
@click.option(
    "-f", "--feature-config", type=click.Path(exists=True, dir_okay=False), help="Extractor YAML."
)
@click.option("--columns/--no-columns", default=False, help="Print every column name.")
def describe(name: str | None, feature_config: str | None, columns: bool) -> None:
    """Show an extractor's configuration and feature layout."""
    import yaml

    ex = _load_extractor(feature_config, name)
    click.echo(yaml.safe_dump(ex.to_dict(), sort_keys=False).rstrip())
    names = ex.feature_names()
    click.echo(
        f"# feature_dim: {len(names)} at {ex.config.sampling_rate} Hz, "
        f"frame_shift {ex.frame_shift} s"
    )
    shown = names if columns else names[:4] + (["..."] if len(names) > 8 else []) + names[-4:]
    for n in shown:
        click.echo(f"#   {n}")


@amt.command()
@click.argument("cutset", type=click.Path(exists=True, dir_okay=False))
@click.argument("output_png", type=click.Path())
@click.option(
    "-f",
    "--feature-config",
    type=click.Path(exists=True, dir_okay=False),
    help="Extractor YAML: compute the features from the cut's audio with this config.",
)
@click.option(
    "-m",
    "--model",
    "name",
    default=None,
    help="Extractor name (e.g. amt-king2019): compute its features from the audio unless the "
    "cut stores features of this type. Default: the stored features' type.",
)
@click.option("--cut-id", default=None, help="Cut to plot (default: the first).")
def plot(
    cutset: str, output_png: str, feature_config: str | None, name: str | None, cut_id: str | None
) -> None:
    """Plot a cut's auditory features to a PNG: the features stored with the cut (their
    model is read from the manifest), or features computed from its audio with -m/-f (the
    cut is resampled to the extractor's rate)."""
    from lhotse import CutSet

    from .plotting import plot_features

    cuts = CutSet.from_file(cutset)
    if cut_id is not None and cut_id not in cuts.ids:
        raise click.BadParameter(f"no cut {cut_id!r} in {cutset}", param_hint="--cut-id")
    cut = cuts[cut_id] if cut_id is not None else next(iter(cuts))
    stored = cut.features.type if cut.has_features else None
    if feature_config is None and name is None:
        if stored is None:
            raise click.UsageError(
                f"cut {cut.id!r} has no stored features: give -m MODEL (see `lhotse-amt amt "
                "list`) or -f CONFIG.yaml to compute them from its audio"
            )
        if stored not in FEATURE_EXTRACTORS or not stored.startswith("amt-"):
            raise click.UsageError(
                f"cut {cut.id!r} stores {stored!r} features, not auditory-model (amt-*) "
                "features: give -m MODEL or -f CONFIG.yaml to compute them from its audio"
            )
        name = stored
    ex = _load_extractor(feature_config, None if feature_config else name)
    if not ex.name.startswith("amt-") or not hasattr(ex, "feature_names"):
        raise click.UsageError(f"{ex.name!r} is not an auditory-model (amt-*) extractor")
    names = ex.feature_names()
    if stored == ex.name and feature_config is None:
        source = f"stored {stored} features"
        feats = cut.load_features()
        if feats.shape[1] != len(names):
            raise click.UsageError(
                f"cut {cut.id!r} stores {feats.shape[1]} {stored} columns but its default "
                f"config gives {len(names)}: pass the YAML the features were computed with "
                "as -f CONFIG.yaml (they are then computed from the audio)"
            )
    else:
        rate = ex.config.sampling_rate
        source = f"{ex.name} features computed from the audio at {rate} Hz"
        audio_cut = cut if cut.sampling_rate == rate else cut.resample(rate)
        try:
            feats = ex.extract(audio_cut.load_audio(), rate)
        except ValueError as e:
            raise click.ClickException(f"{ex.name} on cut {cut.id!r}: {e}") from e
    plot_features(
        feats,
        names,
        ex.frame_shift,
        output_png,
        title=f"{ex.name}: {cut.id}",
        feature_type=ex.name,
    )
    click.echo(f"wrote {output_png} ({source} of cut {cut.id})")


@amt.command()
@click.argument("out_dir", type=click.Path(), default="amt_demo")
@click.option("-m", "--model", "models", multiple=True, help="Extractor(s) (default: all).")
def demo(out_dir: str, models: tuple[str, ...]) -> None:
    """Run every model on a small built-in example: manifests, features and PNGs in OUT_DIR."""
    from .demo import run_demo

    rows = run_demo(out_dir, list(models) or None)
    click.echo(f"{'extractor':<18}{'frames':>8}{'dim':>6}{'time (s)':>10}{'RTF':>8}")
    click.echo("(times include one-off kernel compilation and model set-up)")
    for r in rows:
        click.echo(
            f"{r['model']:<18}{r['frames']:>8}{r['dim']:>6}{r['seconds']:>10.2f}{r['rtf']:>8.3f}"
        )
    click.echo(f"features, manifests and plots are in {out_dir}/")


@amt.command()
@click.argument("names", nargs=-1)
@click.option(
    "-f",
    "--feature-config",
    "configs",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False),
    help="Extractor config YAML (repeatable); its settings decide which kernels compile.",
)
def warmup(names: tuple[str, ...], configs: tuple[str, ...]) -> None:
    """Compile the CPU kernels of the NAMES extractors (default: all amt-* ones) into numba's
    on-disk cache, so that later processes load them instead of compiling: run it when
    building a container image or before starting workers (same NUMBA_CACHE_DIR and CPU)."""
    from .warmup import amt_extractor_names, kernel_cache_dir
    from .warmup import warmup as run_warmup

    extractors: list[str | FeatureExtractor] = [FeatureExtractor.from_yaml(c) for c in configs]
    for n in names:
        if n not in FEATURE_EXTRACTORS or not n.startswith("amt-"):
            raise click.UsageError(
                f"unknown extractor {n!r}; choose from {', '.join(amt_extractor_names())}"
            )
        extractors.append(n)
    for name, cpu_s in run_warmup(extractors or None):
        click.echo(f"{name:<18}{cpu_s:>8.2f} CPU s")
    click.echo(f"kernel cache: {kernel_cache_dir()}")


def _extraction_command(
    group: click.Group, name: str, num_jobs: int, jobs_help: str
) -> Callable[[Callable], Callable]:
    """Decorator registering an extraction command ``name`` in ``group`` with the arguments
    and options shared with Lhotse's ``feat extract-cuts[-batch]`` (``-j/--num-jobs``
    defaulting to ``num_jobs``)."""
    shared = [
        group.command(name=name, context_settings=dict(show_default=True)),
        click.argument("cutset", type=click.Path(exists=True, dir_okay=False, allow_dash=True)),
        click.argument("output_cutset", type=click.Path(allow_dash=True)),
        click.argument("storage_path", type=click.Path()),
        click.option(
            "-f",
            "--feature-manifest",
            type=click.Path(exists=True, dir_okay=False),
            help="Extractor YAML (default: Lhotse's Fbank, as in `lhotse feat`).",
        ),
        click.option(
            "--storage-type",
            type=click.Choice(available_storage_backends()),
            default="numpy_files",
            help="Storage backend for the feature matrices.",
        ),
        click.option("-j", "--num-jobs", type=int, default=num_jobs, help=jobs_help),
    ]

    def decorate(f: Callable[..., None]) -> Callable:
        @functools.wraps(f)
        def command(**params: Any) -> None:
            shared = {k: params.pop(k) for k in _Extraction.__dataclass_fields__}
            f(_Extraction(**shared), **params)

        for deco in reversed(shared):
            command = deco(command)
        return command

    return decorate


@dataclass(frozen=True)
class _Extraction:
    """The arguments every extraction command shares (:func:`_extraction_command`)."""

    cutset: str
    output_cutset: str
    storage_path: str
    feature_manifest: str | None
    storage_type: str
    num_jobs: int

    def extractor(self) -> FeatureExtractor:
        """The extractor of the ``--feature-manifest`` YAML (default: Lhotse's Fbank, as in
        ``lhotse feat``)."""
        from lhotse import Fbank

        if self.feature_manifest:
            return FeatureExtractor.from_yaml(self.feature_manifest)
        return Fbank()


def _extract_cuts_command(group: click.Group, name: str) -> None:
    @_extraction_command(group, name, 1, "Number of parallel processes.")
    @click.option(
        "--overwrite",
        "--restart",
        "overwrite",
        is_flag=True,
        help="Start over: delete the interrupted run's progress or the finished OUTPUT_CUTSET "
        "and the feature files that run wrote.",
    )
    def extract_cuts_cmd(run: _Extraction, overwrite: bool) -> None:
        """Extract features for the cuts in CUTSET, store them under STORAGE_PATH and write
        OUTPUT_CUTSET. An interrupted run resumes where it stopped (progress is kept in
        OUTPUT_CUTSET.partial.jsonl) if the extractor, storage and cuts are the same (else it
        stops and names what differs; --overwrite starts over); a finished output is not
        recomputed; the output manifest is written atomically. One file per cut: the storage
        type is numpy_files or lilcom_files."""
        from lhotse import CutSet

        from .pipeline import (
            RESUMABLE_STORAGE_TYPES,
            OutputLockedError,
            ResumeConflictError,
            extract_cuts,
        )

        if run.storage_type not in RESUMABLE_STORAGE_TYPES:
            raise click.BadParameter(
                f"{run.storage_type!r} stores all cuts in one archive, which cannot be resumed "
                f"safely; use one of {sorted(RESUMABLE_STORAGE_TYPES)}",
                param_hint="--storage-type",
            )
        ex = run.extractor()
        try:
            extract_cuts(
                CutSet.from_file(run.cutset),
                ex,
                run.storage_path,
                run.output_cutset,
                run.num_jobs,
                run.storage_type,
                overwrite=overwrite,
            )
        except (OutputLockedError, ResumeConflictError) as e:
            raise click.ClickException(str(e)) from e


def _extract_cuts_batch_command(group: click.Group, name: str) -> None:
    @_extraction_command(group, name, 4, "Number of dataloader workers.")
    @click.option(
        "-b",
        "--batch-duration",
        type=float,
        default=600.0,
        help="At most this many seconds of audio will be processed in each batch.",
    )
    @click.option(
        "--device",
        default=None,
        help="Run the extractor on this device (e.g. cuda, cuda:1); overrides the config.",
    )
    def extract_cuts_batch_cmd(run: _Extraction, batch_duration: float, device: str | None) -> None:
        """Extract features for CUTSET in batches (one forward pass per batch on the
        extractor's device), store them under STORAGE_PATH and write OUTPUT_CUTSET. Re-running
        the same command resumes an interrupted run (cuts already in OUTPUT_CUTSET are
        skipped)."""
        from lhotse import CutSet
        from lhotse.features.io import get_writer

        ex = run.extractor()
        if device is not None:
            if not hasattr(ex.config, "device"):
                raise click.UsageError(f"{ex.name} has no device setting")
            ex.config.device = device
        Path(run.output_cutset).parent.mkdir(parents=True, exist_ok=True)
        CutSet.from_file(run.cutset).compute_and_store_features_batch(
            extractor=ex,
            storage_path=run.storage_path,
            manifest_path=run.output_cutset,
            batch_duration=batch_duration,
            num_workers=run.num_jobs,
            storage_type=get_writer(run.storage_type),
            overwrite=False,
        )


_extract_cuts_command(amt, "extract-cuts")
_extract_cuts_batch_command(amt, "extract-cuts-batch")
# drop-in replacement of Lhotse's `feat extract-cuts-batch` (same arguments + --device)
feat.commands.pop("extract-cuts-batch", None)
_extract_cuts_batch_command(feat, "extract-cuts-batch")
# drop-in replacement of Lhotse's `feat extract-cuts` (same arguments, resumable)
feat.commands.pop("extract-cuts", None)
_extract_cuts_command(feat, "extract-cuts")


#: ``lhotse-amt --help``: what the tool is (Lhotse's group keeps its own text for ``lhotse``)
HELP = """lhotse-amt: computational auditory models as Lhotse feature extractors.

Dau1997, Osses2021, King2019, Paulick2024 (modulation-domain models, features in model
units) and Glasberg2002, Moore2016 (time-varying loudness, sone) from the lhotse_amt
package. This is Lhotse's own command line with the amt-* extractors registered (plain
`lhotse` cannot see them), plus the `amt` group.

\b
Examples:
  lhotse-amt amt demo amt_demo           every model on a built-in example (features, PNGs)
  lhotse-amt amt list                    the extractors, their rates and dimensions
  lhotse-amt amt warmup                  compile the models' kernels ahead of time
  lhotse-amt feat write-default-config -f amt-dau1997 dau.yaml
  lhotse-amt feat extract-cuts -f dau.yaml cuts.jsonl.gz out.jsonl.gz feats/   (resumable)
  lhotse-amt amt plot out.jsonl.gz dau.png
"""


def main() -> None:
    """The ``lhotse-amt`` entry point."""
    cli.help = HELP
    _enable_process_settings()
    cli()


def _enable_process_settings() -> None:
    """The process-wide settings the package leaves to its users (see ``lhotse_amt``),
    turned on for the command line: huge pages, a host cache of at most
    ``CLI_HOST_CACHE_MB`` (a quarter of the memory where that is less) unless
    ``LHOTSE_AMT_HOST_CACHE_MB`` is set, fork-safe numba threading and an exit without
    the garbage collector's final passes."""
    import os

    from ._alloc import CLI_HOST_CACHE_MB, _physical_memory

    lhotse_amt.enable_huge_pages()
    if not os.environ.get("LHOTSE_AMT_HOST_CACHE_MB", "").strip():
        lhotse_amt.enable_host_cache(min(CLI_HOST_CACHE_MB, _physical_memory() / 4 / 2**20))
    lhotse_amt.use_fork_safe_threading()
    lhotse_amt.skip_exit_collection()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
