"""The fixed-order matrix product of the loudness models (lhotse_amt.kernels.matmul)."""

import numpy as np
import pytest
import torch

from lhotse_amt.kernels import matmul as mm


@pytest.fixture
def restore_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1, 1, 1), (7, 5, 3), (131, 32, 258), (130, 259, 1109)])
def test_matmul_matches_float64_product(dtype, shape):
    M, K, N = shape
    rng = np.random.default_rng(M + K + N)
    a = rng.standard_normal((M, K)).astype(dtype)
    b = rng.standard_normal((K, N)).astype(dtype)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    got = mm.matmul(a, b)
    assert got.dtype == dtype and got.shape == (M, N)
    tol = (3e-6 if dtype == np.float32 else 1e-14) * np.sqrt(K)
    scale = (
        np.sqrt((a.astype(np.float64) ** 2).sum(1))[:, None]
        * np.sqrt((b.astype(np.float64) ** 2).sum(0))[None, :]
    )
    assert np.all(np.abs(got - ref) <= tol * scale)


def test_matmul_strided_view_and_out():
    # a sliding-window view of a signal (overlapping rows), as for the spectrum's segments
    rng = np.random.default_rng(3)
    z = rng.standard_normal(32 * 40 + 64).astype(np.float32)
    seg = np.lib.stride_tricks.sliding_window_view(z, 64)[::32]
    b = rng.standard_normal((64, 70)).astype(np.float32)
    out = np.full((seg.shape[0], 70), np.nan, np.float32)
    res = mm.matmul(seg, b, out=out)
    assert res is out
    np.testing.assert_array_equal(out, mm.matmul(np.ascontiguousarray(seg), b))
    np.testing.assert_allclose(out, seg.astype(np.float64) @ b, rtol=1e-5, atol=1e-4)


def test_matmul_bits_do_not_depend_on_blocking_or_threads(restore_threads):
    # each element is one chain of multiply-adds in ascending k: the same bits for a row
    # computed alone or in a block of four, for a column in any column block, at any
    # thread count
    rng = np.random.default_rng(4)
    a = rng.standard_normal((203, 300)).astype(np.float32)
    b = rng.standard_normal((300, 1109)).astype(np.float32)
    results = []
    for n in (1, 2):
        torch.set_num_threads(n)
        results.append(mm.matmul(a, b))
    np.testing.assert_array_equal(results[0], results[1])
    for rows in (slice(0, 1), slice(5, 8), slice(101, 203)):
        part = mm.matmul(a[rows], b)
        np.testing.assert_array_equal(part, results[0][rows])
    np.testing.assert_array_equal(mm.matmul(a, b[:, 600:]), results[0][:, 600:])
    np.testing.assert_array_equal(mm.matmul(a[:, :1], b[:1]), a[:, :1] * b[:1])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matmul_zero_terms_and_rows_leave_the_chains_as_they_are(dtype):
    # the kernel takes whole groups of four rows and four k terms; other shapes are padded
    # with zero terms and rows: the values must be those of the product padded by hand
    rng = np.random.default_rng(5)
    a = rng.standard_normal((10, 301)).astype(dtype)
    b = rng.standard_normal((301, 37)).astype(dtype)
    got = mm.matmul(a, b)
    a4 = np.zeros((12, 304), dtype)
    a4[:10, :301] = a
    b4 = np.zeros((304, 37), dtype)
    b4[:301] = b
    np.testing.assert_array_equal(got, mm.matmul(a4, b4)[:10])
    # the padded rows and columns touch no row of the result but their own
    np.testing.assert_array_equal(got[9:], mm.matmul(a[9:], b))


def test_matmul_empty_and_zero_inner_dimension():
    a = np.ones((3, 0), np.float64)
    b = np.ones((0, 4), np.float64)
    np.testing.assert_array_equal(mm.matmul(a, b), np.zeros((3, 4)))
    assert mm.matmul(np.ones((0, 2)), np.ones((2, 5))).shape == (0, 5)


def test_matmul_rejects_bad_input():
    a = np.ones((3, 4), np.float32)
    with pytest.raises(ValueError, match="matmul needs"):
        mm.matmul(a, np.ones((5, 2), np.float32))
    with pytest.raises(TypeError, match="float32 or two float64"):
        mm.matmul(a, np.ones((4, 2), np.float64))
    with pytest.raises(TypeError, match="float32 or two float64"):
        mm.matmul(a.astype(np.int64), np.ones((4, 2), np.int64))
    with pytest.raises(ValueError, match="out must be"):
        mm.matmul(a, np.ones((4, 2), np.float32), out=np.empty((2, 3), np.float32))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_contiguous_and_strided_a_share_one_compiled_version(dtype):
    rng = np.random.default_rng(3)
    full = rng.standard_normal((40, 34)).astype(dtype)
    b = rng.standard_normal((17, 9)).astype(dtype)
    strided = full[:, ::2]
    contiguous = np.ascontiguousarray(strided)
    assert not strided.flags.c_contiguous
    np.testing.assert_array_equal(mm.matmul(strided, b), mm.matmul(contiguous, b))
    versions = [s for s in mm._matmul_serial.signatures if s[0].dtype == s[1].dtype]
    dtypes = [str(s[0].dtype) for s in versions]
    assert dtypes.count(np.dtype(dtype).name) == 1
