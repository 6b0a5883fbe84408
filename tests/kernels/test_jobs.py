"""The launch of serial register kernels over threads (:mod:`lhotse_amt.kernels.jobs`):
every job runs once whatever the thread count, results do not depend on it, and a forked
child launches on its own threads."""

from __future__ import annotations

import multiprocessing as mp

import numpy as np
import pytest
import torch

from lhotse_amt.kernels import jobs, modbank_simd


def _count(j0: int, j1: int, hits: np.ndarray) -> None:
    hits[j0:j1] += 1


@pytest.mark.parametrize("threads", [1, 2, 3, 5])
@pytest.mark.parametrize("n_jobs", [0, 1, 2, 7])
def test_every_job_runs_once(threads: int, n_jobs: int) -> None:
    n = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        hits = np.zeros(n_jobs, np.int64)
        jobs.run_jobs(_count, n_jobs, (hits,))
        assert (hits == 1).all()
    finally:
        torch.set_num_threads(n)


def _bank_out(threads: int) -> tuple[torch.Tensor, dict]:
    from lhotse_amt.models.dau1997 import Dau1997

    bank = Dau1997(16000).modulation
    idx = torch.arange(20)  # 3 blocks of 8 channels per item, 3 items: 9 jobs
    x = torch.tensor(np.abs(np.random.default_rng(0).standard_normal((3, 20, 600))))
    n = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        filters = (
            bank.lp_sos, bank.prefilter_sos, bank.poles[idx, 1:, 0], bank.gains[idx, 1:, 0],
            bank.use_abs[idx, 1:], bank.scale[idx],
        )  # fmt: skip
        return modbank_simd.modulation_bank(x, filters, None)
    finally:
        torch.set_num_threads(n)


def test_register_kernel_same_result_on_more_threads() -> None:
    y1, s1 = _bank_out(1)
    y2, s2 = _bank_out(2)
    assert torch.equal(y1, y2)
    for k in s1:
        assert torch.equal(s1[k], s2[k]), k


def _in_child(q: mp.Queue) -> None:
    hits = np.zeros(4, np.int64)
    torch.set_num_threads(2)
    jobs.run_jobs(_count, 4, (hits,))
    q.put(hits.tolist())


def test_forked_child_launches_on_its_own_threads() -> None:
    n = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        jobs.run_jobs(_count, 2, (np.zeros(2, np.int64),))  # the parent's pool exists
    finally:
        torch.set_num_threads(n)
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_in_child, args=(q,))
    p.start()
    try:
        assert q.get(timeout=60) == [1, 1, 1, 1]
    finally:
        p.join(10)
        if p.is_alive():
            p.kill()


def test_opt_level_lowers_and_restores_numba_level() -> None:
    import numba

    old = numba.config.OPT
    with jobs.opt_level(2):
        assert numba.config.OPT == min(int(old), 2)
    assert numba.config.OPT is old
    with pytest.raises(RuntimeError), jobs.opt_level(1):
        raise RuntimeError
    assert numba.config.OPT is old
