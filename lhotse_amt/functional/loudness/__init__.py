"""Stateless stages of the Moore–Glasberg time-varying loudness models (plain torch).

The building blocks shared by :class:`lhotse_amt.models.Glasberg2002` (Glasberg & Moore 2002,
J. Audio Eng. Soc. 50, 331–342) and :class:`lhotse_amt.models.Moore2016` (Moore, Glasberg,
Varathanathan & Schlittenlacher 2016, Trends in Hearing 20; with the 2018 AGC constants of
Moore, Jervis, Harries & Schlittenlacher), one file per stage:

* :mod:`.scales`: constants, tables, ERB-number scale, input handling;
* :mod:`.spectrum`: outer/middle-ear FIR and the six-window spectrum;
* :mod:`.excitation`: excitation pattern and specific loudness;
* :mod:`.temporal`: attack/release AGC and binaural inhibition.

Conventions: sound pressure in pascals; intensities relative to (20 µPa)², so ``10 log10(I)``
is a level in dB SPL; 32 kHz, one frame per millisecond (hop 32 samples), frame ``j`` centred
on input sample ``32 j``; the bins ``k = 1 … 960`` (15.625 Hz … 15 kHz) of a 2048-point DFT,
stored at index ``k - 1``; ERB-number ``Cam = 21.366 log10(0.004368 f + 1)``.

The no-gradient CPU fast path (numba kernels, sliding DFT, fused excitation) is
:mod:`lhotse_amt.ops.loudness_fast`; the stage modules are :mod:`lhotse_amt.modules.loudness`.
"""

from .excitation import (
    P1000,
    SLOPE_BETA,
    ExcitationMatrices,
    SpecificLoudnessParams,
    erb_level_db,
    excitation_gm2002,
    excitation_matrices,
    excitation_moore2016,
    excitation_pattern,
    specific_loudness,
    specific_loudness_params,
)
from .scales import (
    BIN_HZ,
    FS,
    HOP,
    N_BINS,
    N_FFT,
    P0,
    bin_hz,
    cam_to_hz,
    check_pressure_signal,
    erb_hz,
    hz_to_cam,
    loudness_tables,
    pa_from_full_scale,
    resample_to_32k,
    roex,
    roex_p,
)
from .spectrum import (
    VARIANTS,
    WINDOW_LENGTHS,
    autocorr_basis,
    band_plan,
    dft_bases,
    fir_filter_full,
    frame_span,
    multires_intensity,
    prune_components,
    window_and_scale,
)
from .temporal import (
    AGC_BACKENDS,
    agc,
    agc_reference,
    binaural_inhibition,
    binaural_inhibition_reference,
    binaural_smoothing_matrix,
    log_sech,
)

__all__ = [
    "AGC_BACKENDS",
    "BIN_HZ",
    "ExcitationMatrices",
    "FS",
    "HOP",
    "N_BINS",
    "N_FFT",
    "P0",
    "P1000",
    "SLOPE_BETA",
    "SpecificLoudnessParams",
    "VARIANTS",
    "WINDOW_LENGTHS",
    "agc",
    "agc_reference",
    "autocorr_basis",
    "band_plan",
    "bin_hz",
    "binaural_inhibition",
    "binaural_inhibition_reference",
    "binaural_smoothing_matrix",
    "cam_to_hz",
    "check_pressure_signal",
    "dft_bases",
    "erb_hz",
    "erb_level_db",
    "excitation_gm2002",
    "excitation_matrices",
    "excitation_moore2016",
    "excitation_pattern",
    "fir_filter_full",
    "frame_span",
    "hz_to_cam",
    "log_sech",
    "loudness_tables",
    "multires_intensity",
    "pa_from_full_scale",
    "prune_components",
    "resample_to_32k",
    "roex",
    "roex_p",
    "specific_loudness",
    "specific_loudness_params",
    "window_and_scale",
]
