"""Ahead-of-time compilation (``lhotse_amt.warmup``, ``lhotse-amt amt warmup``) and where
numba caches the kernels: ``NUMBA_CACHE_DIR``, else next to the sources, else (package
directory not writable) the user's cache directory. Each case runs in a fresh process with
its own empty cache directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import lhotse_amt
from lhotse_amt.warmup import amt_extractor_names, warmup

PACKAGE = Path(lhotse_amt.__file__).resolve().parent


def _cache_files(root: Path) -> dict[str, int]:
    return {
        str(p.relative_to(root)): p.stat().st_mtime_ns
        for p in root.rglob("*")
        if p.suffix in (".nbi", ".nbc")
    }


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env.update(extra)
    return env


def test_warmup_command_fills_the_cache_and_a_second_run_only_loads(tmp_path):
    cache = tmp_path / "numba"
    cmd = [sys.executable, "-m", "lhotse_amt.cli", "amt", "warmup", "amt-king2019"]
    env = _env(NUMBA_CACHE_DIR=str(cache))
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "amt-king2019" in r.stdout and "CPU s" in r.stdout
    assert f"kernel cache: {cache}" in r.stdout
    first = _cache_files(cache)
    assert any(f.endswith(".nbc") for f in first)  # compiled code was written
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert _cache_files(cache) == first  # everything came from the cache: nothing rewritten


def test_warmup_command_rejects_unknown_names():
    from click.testing import CliRunner

    from lhotse_amt.cli import cli

    r = CliRunner().invoke(cli, ["amt", "warmup", "amt-nonesuch"])
    assert r.exit_code != 0 and "amt-nonesuch" in r.output and "amt-dau1997" in r.output


def test_warmup_checks_its_arguments():
    with pytest.raises(ValueError, match="unknown extractor 'fbank-nonesuch'"):
        warmup(["fbank-nonesuch"])
    with pytest.raises(TypeError, match="extractors"):
        warmup([3])
    with pytest.raises(ValueError, match="seconds"):
        warmup(["amt-dau1997"], seconds=0.0)
    assert amt_extractor_names() == sorted(
        ["amt-dau1997", "amt-osses2021", "amt-king2019", "amt-paulick2024"]
        + ["amt-glasberg2002", "amt-moore2016"]
    )


def test_read_only_package_caches_in_the_user_cache_dir(tmp_path):
    """A copy of the package whose ``kernels/__pycache__`` cannot be created (a file of
    that name stands in for a read-only install, also when the tests run as root)."""
    copy = tmp_path / "site" / "lhotse_amt"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "kernels" / "__pycache__").write_text("not a directory")
    xdg = tmp_path / "user-cache"
    code = (
        "import numpy as np, lhotse_amt\n"
        "from lhotse_amt.kernels.agc import _agc_kernel\n"
        "from lhotse_amt.warmup import kernel_cache_dir\n"
        f"assert lhotse_amt.__file__.startswith({str(copy)!r}), lhotse_amt.__file__\n"
        "x = np.ones((1, 8)); y = np.empty_like(x)\n"
        "_agc_kernel(x, 0.5, 0.1, 0.0, y)\n"
        "print(kernel_cache_dir())\n"
    )
    for d in [copy, *(p for p in copy.rglob("*") if p.is_dir())]:
        d.chmod(0o555)  # read-only for users other than root
    try:
        env = _env(PYTHONPATH=str(copy.parent), XDG_CACHE_HOME=str(xdg))
        r = subprocess.run(
            [sys.executable, "-c", code],
            env=env,
            cwd=tmp_path,  # not the checkout: the copy is the package imported
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        for d in [copy, *(p for p in copy.rglob("*") if p.is_dir())]:
            d.chmod(0o755)
    assert r.returncode == 0, r.stderr[-3000:]
    where = Path(r.stdout.strip().splitlines()[-1])
    assert xdg in where.parents
    assert any(f.endswith(".nbc") for f in _cache_files(where))
