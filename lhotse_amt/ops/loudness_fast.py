"""No-gradient CPU fast path of the loudness models (numba kernels, fixed-order products).

Same values as the plain-torch stages of :mod:`lhotse_amt.functional.loudness` up to float
rounding, but much faster for inference: the ear filter by :mod:`numpy.fft` on the calling
thread, the long analysis windows by the sliding DFT, the excitation stage through the shortest
window's autocorrelation and a fused lower-skirt kernel, and the excitation floor and specific
loudness in one pass (:class:`FastExcitation`). Every function here needs CPU tensors without
gradient; the models take this path only for eager CPU inference (:func:`fast_path_ok`), never
under autograd or while ``torch.compile``/``torch.export`` trace.

Results do not depend on ``torch.set_num_threads``: every product is the fixed-order kernel of
:mod:`lhotse_amt.kernels.matmul` and every copy runs on the calling thread.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from .._dispatch import no_grad_kernels
from ..functional.loudness import (
    HOP,
    N_BINS,
    N_FFT,
    SLOPE_BETA,
    WINDOW_LENGTHS,
    autocorr_basis,
    band_plan,
    bin_hz,
    excitation_matrices,
    frame_span,
    log_sech,
    roex_p,
    window_and_scale,
)
from ..kernels.loudness_plans import KeepRule, TailConstants

__all__ = [
    "fast_path_ok",
    "fir_filter_full_fast",
    "sliding_plans",
    "multires_intensity_fast",
    "binaural_inhibition_fast",
    "FastExcitation",
    "KeepRule",
    "TailConstants",
]


def fast_path_ok(x: Tensor, module: torch.nn.Module) -> bool:
    """True if the no-grad CPU kernels may be used for ``module`` on ``x``: eager (not traced by
    ``torch.compile``/``torch.export``), CPU tensors, no gradient recorded."""
    return x.device.type == "cpu" and no_grad_kernels(x, *module.parameters())


def fir_filter_full_fast(x: Tensor, h: Tensor) -> Tensor:
    """:func:`lhotse_amt.functional.loudness.fir_filter_full` by :mod:`numpy.fft` on the calling
    thread (no gradient): torch's CPU FFT splits its work by the intra-op thread count and its
    results change in the last bits with it, which would make the loudness features depend on
    ``torch.set_num_threads`` (and :mod:`scipy.fft` costs a third of a CPU-second to import at
    a process's first extract). ``x (..., N)``, ``h (M,)`` -> ``(..., N + M - 1)``."""
    n = x.shape[-1] + h.shape[-1] - 1
    nfft = 1 << (n - 1).bit_length()
    xs = x.detach().numpy()
    spec = np.fft.rfft(xs, nfft)
    spec *= np.fft.rfft(h.detach().to(x.dtype).numpy(), nfft)
    y_np = np.fft.irfft(spec, nfft)[..., :n]
    return torch.from_numpy(y_np.astype(xs.dtype, copy=False))


def sliding_plans(variant: str, min_length: int | None = None) -> dict[int, tuple]:
    """Sliding-DFT plans (:func:`lhotse_amt.kernels.loudness_fused.sliding_plan`) of the
    analysis windows that are cheaper by the sliding recursion, keyed by window length.

    The recursion costs a fixed number of operations per frame and frequency (``nw``
    frequencies: the band's bins and their Hann neighbours), the windowed-basis product
    ``L`` per frame and bin. Measured on one core (per frame): sliding ~7.5 ns x ``nw``,
    product ~0.07 ns x ``L`` x bins + 0.4 µs; by default each window takes the cheaper one
    (``"gm2002"``, periodic Hann, shared neighbours: the 2048 … 128-sample windows;
    ``"moore2016"``, symmetric Hann, three frequencies per bin: 2048 … 256). ``min_length``:
    instead, every window of at least this many samples.
    """
    from ..kernels.loudness_fused import sliding_plan

    plans = {}
    for i, (length, bins) in enumerate(zip(WINDOW_LENGTHS, band_plan(variant))):
        if not len(bins):
            continue
        scale = window_and_scale(variant, i)[1]
        plan = sliding_plan(length, bins, variant != "moore2016", scale, HOP, N_FFT)
        n_freq = plan[3].shape[1]
        if min_length is None:
            use = 7.5 * n_freq <= 0.07 * length * len(bins) + 400.0
        else:
            use = length >= min_length
        if use:
            plans[length] = plan
    return plans


@dataclass(frozen=True)
class SpectrumBands:
    """The analysis windows of :func:`multires_intensity_fast` as numpy arrays: per window with
    bins, ``(length, lo, basis)`` (``lo``: first bin - 1, the column of the first bin in the
    ``(N, 960)`` spectrum; ``basis``: ``(length, 2 nb)`` windowed DFT basis), and whether the
    bands tile the 960-bin grid (then every column is written)."""

    windows: tuple[tuple[int, int, np.ndarray], ...]
    full: bool

    @staticmethod
    def from_bases(bases: list[tuple[int, np.ndarray, Tensor]]) -> SpectrumBands:
        """From the ``bases`` argument of the spectrum functions; the bands must be contiguous
        runs of bins."""
        windows = []
        for length, bins, basis in bases:
            if not len(bins):
                continue
            if int(bins[-1]) - int(bins[0]) + 1 != len(bins):
                raise ValueError("multires_intensity_fast needs bands of contiguous bins")
            windows.append((int(length), int(bins[0]) - 1, basis.detach().numpy()))
        n_cover = sum(len(b) for _, b, _ in bases)
        return SpectrumBands(tuple(windows), n_cover == N_BINS and all(len(b) for _, b, _ in bases))


def _intensity_into(
    zp: np.ndarray,
    base: int,
    n_frames: int,
    bands: SpectrumBands,
    sliding: dict[int, tuple] | None,
    out: np.ndarray,
) -> None:
    """Component intensities of ``n_frames`` frames into ``out (R n_frames, 960)`` (row ``r
    n_frames + f``; columns outside the bands are left as they are). ``zp (R, M)``: the frames'
    samples, ``zp[:, base]`` the input time ``32 j - 1024`` of the first frame ``j``."""
    from ..kernels.loudness_fused import power_into, sliding_dft_power
    from ..kernels.matmul import matmul

    for length, lo, basis in bands.windows:
        start = base + 1024 - length // 2
        if sliding and length in sliding:
            sliding_dft_power(zp, start, n_frames, sliding[length], lo, out)
            continue
        span = zp[:, start : start + HOP * (n_frames - 1) + length]
        seg = np.lib.stride_tricks.sliding_window_view(span, length, axis=-1)[:, ::HOP]
        # fixed-order product: the same bits for every thread count (torch's product is
        # not); one row of segments is a strided view of the signal, more rows are copied
        # by numpy on this thread
        power_into(matmul(seg.reshape(-1, length), basis), lo, out)


def _signal_rows(z: Tensor, t0: int, j_first: int, n_frames: int) -> tuple[np.ndarray, int]:
    """:func:`frame_span` of ``z (..., M)`` as a ``(R, M')`` numpy array (``R`` the product of
    the leading dimensions) and the index of its first needed sample."""
    zp, base = frame_span(z.detach(), t0, j_first, n_frames)
    return zp.reshape(-1, zp.shape[-1]).numpy(), base


def multires_intensity_fast(
    z: Tensor,
    t0: int,
    j_first: int,
    n_frames: int,
    bases: list[tuple[int, np.ndarray, Tensor]],
    return_autocorr: Tensor | None = None,
    sliding: dict[int, tuple] | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """:func:`lhotse_amt.functional.loudness.multires_intensity` by the compiled kernels.

    Arguments and result as there (the bands must be contiguous runs of bins); ``sliding``:
    plans of :func:`sliding_plans` (same band plan as ``bases``): the windows they cover are
    computed by the sliding DFT (:func:`lhotse_amt.kernels.loudness_fused.sliding_dft_power`),
    the others by a fixed-order windowed-basis product.
    """
    from ..kernels.loudness_fused import windowed_autocorr

    lead = z.shape[:-1]
    bands = SpectrumBands.from_bases(bases)
    zp, base = _signal_rows(z, t0, j_first, n_frames)
    n_rows = zp.shape[0] * n_frames
    # every bin is written when the bands tile the grid
    out = np.empty if bands.full else np.zeros
    out2 = out((n_rows, N_BINS), dtype=zp.dtype)
    _intensity_into(zp, base, n_frames, bands, sliding, out2)
    inten = torch.from_numpy(out2).reshape(*lead, n_frames, N_BINS)
    if return_autocorr is None:
        return inten
    length = WINDOW_LENGTHS[-1]
    start = base + 1024 - length // 2
    r = windowed_autocorr(zp, start, HOP, n_frames, return_autocorr.double().numpy())
    return inten, torch.from_numpy(r).reshape(*lead, n_frames, length)


def binaural_inhibition_fast(
    s_left: Tensor, s_right: Tensor, smooth: Tensor, p: Tensor | float
) -> tuple[Tensor, Tensor]:
    """:func:`lhotse_amt.functional.loudness.binaural_inhibition_reference` without gradient.

    Equal inputs (diotic sound) skip the smoothing: the ratio is exactly 1, so
    ``I_L = I_R = 2 / (1 + sech(1)^p)``; other inputs take the fixed-order smoothing products
    and the elementwise part in one compiled pass
    (:func:`lhotse_amt.kernels.loudness_fused.binaural_inhibition_apply`, same values to
    ~2 ulp). ``(..., C)`` each.
    """
    if torch.equal(s_left, s_right):
        one = torch.ones((), dtype=s_left.dtype, device=s_left.device)
        inh = 2.0 / (1.0 + torch.exp(p * log_sech(one)))
        return s_left / inh, s_right / inh
    from ..kernels.loudness_fused import binaural_inhibition_apply
    from ..kernels.matmul import matmul

    p = float(p)  # a tensor p without gradient (the models' buffer) is a constant here
    lead = s_left.shape[:-1]
    c = s_left.shape[-1]
    # fixed-order products (the same bits for every thread count) on this thread
    s2 = [t.detach().reshape(-1, c).numpy() for t in (s_left, s_right)]
    sm = smooth.detach().to(s_left.dtype).numpy()
    sl_np, sr_np = (matmul(v, sm) + 1e-13 for v in s2)
    o_l, o_r = binaural_inhibition_apply(*s2, sl_np, sr_np, p)
    return torch.from_numpy(o_l).reshape(*lead, c), torch.from_numpy(o_r).reshape(*lead, c)


class FastExcitation:
    """Excitation pattern for inference on the CPU (no gradient): same result as the torch path.

    Used by the models when no gradient is needed. Equal to :func:`excitation_moore2016` with
    the matrices of :func:`excitation_matrices` (any level variant) up to float rounding, but
    computed as

    * level per ERB at the components and upper skirt: one matrix product with the fixed
      ``[level | upper]`` matrix. Frames with few kept components (tones) use the rows/columns of
      the kept components only; otherwise the 702 bins of the 2-ms window (4–15 kHz) enter
      through the 64 autocorrelation values of its windowed segment (:func:`autocorr_basis`,
      float64), minus the components removed by the pruning rule, which cuts the dominant
      product by a factor of about three;
    * lower skirt (level dependent, one exponential per component/channel pair): the fused
      numba kernel :func:`lhotse_amt.kernels.loudness.lower_skirt`, which also computes the
      components' lower-slope factors from their levels per ERB;
    * :meth:`specific_loudness_frames`: the whole no-grad chain from the ear-filtered signal to
      the specific loudness, chunked over frames (temporaries stay in cache) with the floor of
      the excitation and the specific loudness in one kernel
      (:func:`lhotse_amt.kernels.loudness_fused.specific_loudness_tail`); the long analysis
      windows of the spectrum by the sliding DFT (:func:`sliding_plans`).

    No truncation of the roex weights beyond the reference's own (``u <= 80``, ``g <= 4``,
    weights < 1e-30 set to 0), so the results agree with the torch path to float rounding
    (float64: ~1e-13 relative; float32: ~1e-6).

    Args:
        fc: channel centre frequencies (Hz).
        level_variant: ``"moore2016"`` or ``"component"`` (see :func:`excitation_matrices`).
        band_variant: band plan of the spectrum (``"moore2016"`` or ``"gm2002"``).
        dtype: computation dtype.
    """

    def __init__(
        self, fc: np.ndarray, level_variant: str, band_variant: str, dtype: torch.dtype
    ) -> None:
        mats = excitation_matrices(fc, level_variant)
        wu = np.concatenate([mats.level, mats.upper], axis=1)
        window, bins, a = autocorr_basis(band_variant)
        if bins[-1] != N_BINS or np.any(np.diff(bins) != 1):
            raise ValueError("the shortest window must cover a contiguous top band")
        self.h0 = int(bins[0] - 1)
        self.dtype = dtype
        self.np_dtype = np.dtype(np.float64 if dtype == torch.float64 else np.float32)
        self.n_channels = len(fc)
        # the tables of the chunk loop, numpy in the computation dtype ([level | upper] per
        # component; its rows from h0 on also serve the sparse removal of pruned
        # components, one 1110-wide row each: in the computation dtype a float32 model moves
        # half the bytes, and the float64 autocorrelation route itself is accurate to ~1e-13
        # of the band's energy, coarser than float32 weights on these tiny terms)
        self.wu = np.ascontiguousarray(wu, dtype=self.np_dtype)
        # the low band's weights with zero rows up to a multiple of 4 components: the product
        # kernel takes whole groups of four terms, and the extra ones (any intensity times a
        # zero weight) leave every chain's value as it is, so no copy of the intensities is
        # padded for it
        self.h4 = -(-self.h0 // 4) * 4
        self.wu_low = np.zeros((self.h4, wu.shape[1]), self.np_dtype)
        self.wu_low[: self.h0] = self.wu[: self.h0]
        self.awu = a @ wu[self.h0 :]  # float64
        self.window = np.asarray(window, dtype=np.float64)
        self.sliding = sliding_plans(band_variant)
        self.fc = np.asarray(fc, dtype=np.float64)
        self.p = roex_p(self.fc)
        self.f = bin_hz()
        self.n_below = mats.n_below

    def level_upper(
        self,
        rows: Tensor,
        ik: Tensor,
        autocorr: Tensor,
        col_kept: np.ndarray,
        col_pruned: np.ndarray,
    ) -> Tensor:
        """Level per ERB at the components and upper skirt, ``(N, 960 + C)`` (no chunking).

        Args:
            rows: intensities ``(N, 960)``; ``ik``: kept intensities (``rows`` where kept,
                else 0); ``autocorr``: ``(N, 64)`` of the shortest window (float64).
            col_kept: ``(960,)`` bool, component kept in any row; ``col_pruned``: ``(960,)``
                number of rows in which the component is non-zero but not kept.
        """
        y = self._level_upper(
            rows.numpy(), ik.numpy(), autocorr.to(torch.float64).numpy(), col_kept, col_pruned
        )
        return torch.from_numpy(y)

    def _level_upper(
        self,
        rows: np.ndarray,
        ik: np.ndarray,
        autocorr: np.ndarray,
        col_kept: np.ndarray,
        col_pruned: np.ndarray,
    ) -> np.ndarray:
        # :meth:`level_upper` on numpy arrays
        from lhotse_amt.kernels.loudness_fused import subtract_pruned
        from lhotse_amt.kernels.matmul import matmul

        h0 = self.h0
        wu = self.wu
        cols = np.flatnonzero(col_kept)
        n_u = cols.size
        if n_u == 0:
            return np.zeros((rows.shape[0], wu.shape[1]), rows.dtype)
        # cost per row in float32 matrix rows (measured, one thread): the union of kept
        # components (gathered, or all 960) vs the low band + the autocorrelation (64
        # float64 rows with a short inner dimension: ~320) + ~14 per pruned component of
        # the row (sparse float64 updates, see subtract_pruned)
        pruned_per_row = float(col_pruned[h0:].sum()) / max(rows.shape[0], 1)
        auto_cost = h0 + 320.0 + 14.0 * pruned_per_row
        # the products are fixed-order (kernels.matmul): the same bits for every thread
        # count, and no BLAS thread pool to stall on a busy machine
        if n_u <= auto_cost:
            if n_u == N_BINS:
                return matmul(ik, wu)
            # gathered and padded to whole groups of four terms (zero weights, see wu_low)
            n4 = -(-n_u // 4) * 4
            w_kept = np.empty((n4, wu.shape[1]), wu.dtype)
            np.take(wu, cols, axis=0, out=w_kept[:n_u])
            w_kept[n_u:] = 0.0
            cols = np.concatenate([cols, np.full(n4 - n_u, cols[0])])
            return matmul(ik[:, cols], w_kept)
        acc = matmul(ik[:, : self.h4], self.wu_low)
        hi = matmul(autocorr, self.awu)
        # minus the not-kept components the autocorrelation includes, and acc += hi, in one
        # pass (a row without pruned components costs a scan of compares)
        subtract_pruned(hi, rows, ik, h0, self.wu[h0:], add_to=acc)
        return acc

    def __call__(self, inten: Tensor, keep: Tensor, autocorr: Tensor, chunk: int = 256) -> Tensor:
        """Excitation ``(..., F, C)`` (not floored) from intensities and kept mask
        ``(..., F, 960)`` and the shortest window's autocorrelation ``(..., F, 64)``."""
        lead = inten.shape[:-1]
        rows = inten.reshape(-1, N_BINS).to(self.dtype).numpy()
        kp = keep.reshape(-1, N_BINS).numpy()
        rr = autocorr.reshape(-1, autocorr.shape[-1]).to(torch.float64).numpy()
        out = np.empty((rows.shape[0], self.n_channels), rows.dtype)
        for r0 in range(0, rows.shape[0], chunk):
            r1 = min(r0 + chunk, rows.shape[0])
            rc, kc = rows[r0:r1], kp[r0:r1]
            ik = np.where(kc, rc, rc.dtype.type(0.0))
            col_pruned = ((~kc) & (rc != 0)).sum(0)
            y = self._level_upper(rc, ik, rr[r0:r1], kc.any(0), col_pruned)
            out[r0:r1] = y[:, N_BINS:] + self._lower(ik, y)
        return torch.from_numpy(out).reshape(*lead, self.n_channels)

    def _lower(self, ik: np.ndarray, y: np.ndarray) -> np.ndarray:
        # lower skirt; the kernel computes each kept component's lower-slope factor
        # s = p_l / p = 1 - 0.35 / p(1 kHz) (X - 51) from its level per ERB
        # X = 10 log10(max(., 1e-30)) (the first 960 columns of y)
        from lhotse_amt.kernels.loudness import lower_skirt_numpy

        slope = (1.0 + 51.0 * SLOPE_BETA, -10.0 * SLOPE_BETA)
        return lower_skirt_numpy(ik, y[:, :N_BINS], self.p, self.fc, self.f, self.n_below, slope)

    def specific_loudness_frames(
        self,
        z: Tensor,
        t0: int,
        j_first: int,
        n_frames: int,
        bases: list[tuple[int, np.ndarray, Tensor]],
        keep_rule: KeepRule,
        sl: TailConstants,
        c: float,
        high_level: str,
        chunk: int = 128,
        excitation_db: float | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Spectrum, excitation and specific loudness, chunked over frames (no gradient).

        Frames are processed in chunks of ``chunk`` so that every temporary stays in cache:
        :func:`multires_intensity_fast` -> kept components (``keep_rule``, see
        :class:`KeepRule`) ->
        :meth:`level_upper` -> lower skirt (:func:`lhotse_amt.kernels.loudness.
        lower_skirt_numpy`) -> ``E = max(E, 1e-10)`` and ``N'``
        (:func:`lhotse_amt.kernels.loudness_fused.specific_loudness_tail`, same branches as
        :func:`specific_loudness`). The loop runs on numpy arrays: no torch operation per
        chunk.

        Args:
            z, t0, j_first, n_frames, bases: as for :func:`multires_intensity`; ``z (..., M)``.
            sl: per-channel constants of the specific-loudness kernel.
            c, high_level: as for :func:`specific_loudness`.
            excitation_db: if given, the excitation is returned as a level ``10 log10(E)``
                (dB), with this value in frames without kept components.

        Returns:
            ``(N', E, any_kept)``: ``(..., F, C)`` specific loudness (sone/Cam, 0 in frames
            without kept components and in masked channels), ``(..., F, C)`` excitation
            (intensity units, floored at 1e-10; or dB, see ``excitation_db``) and
            ``(..., F)`` bool.
        """
        from lhotse_amt.kernels.loudness_fused import (
            kept_components,
            specific_loudness_tail,
            windowed_autocorr,
        )

        lead = z.shape[:-1]
        bands = SpectrumBands.from_bases(bases)
        zp, base = _signal_rows(z, t0, j_first, n_frames)
        n_lead = zp.shape[0]
        nsp = np.empty((n_lead, n_frames, self.n_channels), self.np_dtype)
        exc = np.empty_like(nsp)
        anyk = np.empty((n_lead, n_frames), np.bool_)
        # one spectrum buffer for every chunk (bands that do not tile the grid leave columns
        # at zero, which no chunk writes)
        alloc = np.empty if bands.full else np.zeros
        inten = alloc((n_lead * min(chunk, n_frames), N_BINS), zp.dtype)
        a_len = WINDOW_LENGTHS[-1]
        for f0 in range(0, n_frames, chunk):
            nf = min(chunk, n_frames - f0)
            b0 = base + HOP * f0
            rows = inten[: n_lead * nf]
            _intensity_into(zp, b0, nf, bands, self.sliding, rows)
            rr = windowed_autocorr(zp, b0 + 1024 - a_len // 2, HOP, nf, self.window)
            rows = rows.astype(self.np_dtype, copy=False)
            ik, ak, col_kept, col_pruned = kept_components(rows, keep_rule)
            y = self._level_upper(rows, ik, rr.reshape(-1, a_len), col_kept, col_pruned)
            low = self._lower(ik, y)
            upper = np.ascontiguousarray(y[:, N_BINS:])
            if n_lead == 1:  # the chunk's rows are contiguous rows of the outputs
                e_np, n_np = exc[0, f0 : f0 + nf], nsp[0, f0 : f0 + nf]
            else:
                e_np, n_np = np.empty_like(upper), np.empty_like(upper)
            specific_loudness_tail(upper, low, ak, sl, c, high_level, e_np, n_np, excitation_db)
            if n_lead > 1:
                exc[:, f0 : f0 + nf] = e_np.reshape(n_lead, nf, -1)
                nsp[:, f0 : f0 + nf] = n_np.reshape(n_lead, nf, -1)
            anyk[:, f0 : f0 + nf] = ak.reshape(n_lead, nf)
        shape = (*lead, n_frames)
        return (
            torch.from_numpy(nsp).reshape(*shape, self.n_channels),
            torch.from_numpy(exc).reshape(*shape, self.n_channels),
            torch.from_numpy(anyk).reshape(shape),
        )
