"""Start-up cost of a fresh process: CPU seconds until its first 1-s extract is done.

Each row runs a fresh Python process that imports the package, builds the extractor with
its default configuration and extracts features of 1 s of noise at the extractor's
sampling rate. Two figures per run, both CPU time (user + system, all threads), so they
hold on a shared machine where wall time does not:

* ``process``: the whole child (``os.wait4`` resource usage): interpreter, imports
  (PyTorch, Lhotse, numba), the extract and the exit;
* ``extract``: the child's own ``time.process_time()`` from building the extractor to the
  end of its first extract (numba's set-up and the kernels' compiles or cache loads
  included, the imports not).

* ``empty cache``: numba's cache directory is a fresh temporary one
  (``NUMBA_CACHE_DIR``): every kernel the extract needs is compiled, as in a fresh
  container or a worker image whose cache was not built (``lhotse-amt amt warmup``).
* ``warm cache``: the same process again with the cache the first run filled.
* ``kaldi-fbank``: the same job with Lhotse's ``kaldi-fbank`` (``Fbank``) (no lhotse_amt import), the
  start-up of a plain PyTorch feature extractor.

The ``amt-*`` children turn on the ``lhotse-amt`` command line's process settings (huge
pages, host cache, fork-safe threads and :func:`lhotse_amt.skip_exit_collection`, which
spares the exit its garbage collections); ``--no-opt-in`` leaves them off (a script that
does not call them).

The package's modules run from compiled bytecode, as from an installed wheel (and as
PyTorch's and Lhotse's do): before the runs, ``compileall`` writes hash-checked ``.pyc``
files next to them (a source edited later is recompiled, never run stale). Where the
environment keeps Python from writing bytecode (``PYTHONDONTWRITEBYTECODE``, e.g. a shared
working tree), every process would otherwise compile the ~100 modules it imports from
source, about 0.15 CPU-s. ``--no-bytecode`` measures that case: the children import a
copy of the package without bytecode (whether they write and reuse it is then up to the
environment).

``--detail`` prints, per extractor, every kernel signature the first extract compiled (CPU
seconds, number of ``literally`` arguments).

    python benchmarks/bench_cold_start.py [--models amt-dau1997 ...] [--repeat 1] [--detail]
        [--no-bytecode]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time

MODELS = (
    "amt-dau1997",
    "amt-osses2021",
    "amt-king2019",
    "amt-paulick2024",
    "amt-glasberg2002",
    "amt-moore2016",
)

_CHILD = r"""
import sys, time
name, detail = sys.argv[1], sys.argv[2] == "1"
import numpy as np
if detail:  # CPU seconds of every top-level kernel compile (nested ones are inside)
    from numba.core import event
    stack = []
    class Compiles(event.Listener):
        def on_start(self, e):
            stack.append(time.process_time())
        def on_end(self, e):
            t = time.process_time() - stack.pop()
            if not stack:
                f = e.data["dispatcher"].py_func
                mod = f.__module__.rsplit(".", 1)[-1]
                lits = str(e.data["args"]).count("Literal")
                print("DETAIL", f"{mod}.{f.__name__}", f"{t:.2f}", f"literals={lits}")
    event.register("numba:compile", Compiles())
if name == "kaldi-fbank":
    from lhotse.features.base import FEATURE_EXTRACTORS
    t_build = time.process_time()
    ex = FEATURE_EXTRACTORS["kaldi-fbank"]()
else:
    import lhotse_amt
    from lhotse.features.base import FEATURE_EXTRACTORS
    if {opt_in}:
        lhotse_amt.enable_huge_pages()
        lhotse_amt.enable_host_cache(2048)
        lhotse_amt.use_fork_safe_threading()
        lhotse_amt.skip_exit_collection()
    t_build = time.process_time()
    ex = FEATURE_EXTRACTORS[name]()
sr = ex.config.sampling_rate
x = (0.05 * np.random.default_rng(0).standard_normal((getattr(ex, "input_channels", 1), sr)))
x = x.astype(np.float32)
f = ex.extract(x, sr)
print("EXTRACT", time.process_time() - t_build)
assert np.isfinite(f).all(), name
"""


#: a directory put first on the children's import path (``--no-bytecode``: the package copy)
_PATH: list[str] = []


def run_child(name: str, cache_dir: str, detail: bool, opt_in: bool) -> tuple[float, float, str]:
    """CPU seconds (user + system), wall seconds and stdout of one fresh process."""
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir)
    if _PATH:
        env["PYTHONPATH"] = os.pathsep.join(_PATH + [env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    code = _CHILD.replace("{opt_in}", "True" if opt_in else "False")
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", code, name, "1" if detail else "0"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{name}: child exited with {proc.returncode}")
    return usage.ru_utime + usage.ru_stime, wall, out


def _package_dir() -> str:
    spec = importlib.util.find_spec("lhotse_amt")
    assert spec is not None and spec.submodule_search_locations, "lhotse_amt not found"
    return spec.submodule_search_locations[0]


def compile_package() -> None:
    """Hash-checked bytecode of every module of the package, next to its source (where it
    is already there and current, nothing is written)."""
    cmd = [sys.executable, "-m", "compileall", "-q", "--invalidation-mode", "checked-hash"]
    # a module that does not compile is left to the processes (they report it)
    subprocess.run([*cmd, _package_dir()], stdout=subprocess.DEVNULL)


def copy_package() -> str:
    """A copy of the package without its bytecode (nor numba's in-tree cache) in a new
    temporary directory, which is returned (for the children's import path)."""
    root = tempfile.mkdtemp(prefix="bench_cold_start_")
    dest = os.path.join(root, "lhotse_amt")
    shutil.copytree(_package_dir(), dest, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    ap.add_argument("--repeat", type=int, default=1, help="runs per cell (the minimum is shown)")
    ap.add_argument("--detail", action="store_true", help="kernels compiled per extractor")
    ap.add_argument(
        "--no-opt-in",
        action="store_true",
        help="leave huge pages, host cache, threading layer and exit collections as they are "
        "(the CLI sets them)",
    )
    ap.add_argument(
        "--no-bytecode",
        action="store_true",
        help="no compiled bytecode for the package (each process compiles its modules)",
    )
    args = ap.parse_args()
    opt_in = not args.no_opt_in
    if args.no_bytecode:
        _PATH.append(copy_package())
    else:
        compile_package()
    try:
        run_table(args, opt_in)
    finally:
        for path in _PATH:
            shutil.rmtree(path, ignore_errors=True)


def _extract_seconds(out: str) -> float:
    """The child's CPU seconds from building the extractor to the end of its first extract."""
    return next(float(line.split()[1]) for line in out.splitlines() if line.startswith("EXTRACT"))


def run_table(args: argparse.Namespace, opt_in: bool) -> None:
    """Prints the table: ``kaldi-fbank``, then each extractor's empty and warm cache."""
    fb_runs = [run_child("kaldi-fbank", tempfile.mkdtemp(), False, False) for _ in range(2)]
    fb = min(r[0] for r in fb_runs)
    fb_x = min(_extract_seconds(r[2]) for r in fb_runs)
    print(
        f"{'extractor':<18}{'empty cache:':>13}{'':>9}{'warm cache:':>12}{'':>9}{'':>8}\n"
        f"{'':<18}{'process':>13}{'extract':>9}{'process':>12}{'extract':>9}{'x fbank':>8}"
    )
    print(f"{'kaldi-fbank':<18}{'':>13}{'':>9}{fb:>12.2f}{fb_x:>9.2f}{1.0:>8.2f}")
    for name in args.models:
        cold, cold_x, warm, warm_x = [], [], [], []
        detail_out = ""
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory() as d:
                c, _, out = run_child(name, d, args.detail, opt_in)
                cold.append(c)
                cold_x.append(_extract_seconds(out))
                detail_out = detail_out or out
                w, _, out = run_child(name, d, False, opt_in)
                warm.append(w)
                warm_x.append(_extract_seconds(out))
        print(
            f"{name:<18}{min(cold):>13.2f}{min(cold_x):>9.2f}{min(warm):>12.2f}"
            f"{min(warm_x):>9.2f}{min(warm) / fb:>8.2f}",
            flush=True,
        )
        if args.detail:
            for line in detail_out.splitlines():
                if line.startswith("DETAIL"):
                    print("    ", *line.split()[1:])


if __name__ == "__main__":
    main()
