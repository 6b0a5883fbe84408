"""Triton kernels (CUDA) of the differentiable operators in :mod:`lhotse_amt.ops`, one
module per operator (which the operators import at first use on CUDA:
:class:`lhotse_amt.ops.rowop.DeviceKernels`); this module gathers their host functions in
one namespace (tests, availability).

* :mod:`lhotse_amt.kernels.triton_sos`: ``sos_forward`` / ``sos_backward``,
* :mod:`lhotse_amt.kernels.triton_resonator`: ``resonator_forward`` / ``resonator_backward``,
* :mod:`lhotse_amt.kernels.triton_adaptation`: ``adaptation_forward`` /
  ``adaptation_backward``,
* :mod:`lhotse_amt.kernels.triton_ihc_paulick`: ``ihc_paulick_forward`` /
  ``ihc_paulick_backward``,
* :mod:`lhotse_amt.kernels.triton_agc`: ``agc_forward`` / ``agc_backward``,
* :mod:`lhotse_amt.kernels.triton_envelope`: ``envelope_forward`` /
  ``envelope_backward_direct`` / ``envelope_backward_finish``,
* :mod:`lhotse_amt.kernels.triton_fir`: ``fir_forward`` / ``fir_backward``.

Each has the functions, arguments, results and semantics of the operator's numba kernels
(:mod:`lhotse_amt.kernels.autodiff`, :mod:`~lhotse_amt.kernels.ihc_paulick_grad`,
:mod:`~lhotse_amt.kernels.agc_grad`, :mod:`~lhotse_amt.kernels.envelope`,
:mod:`~lhotse_amt.kernels.fir_grad`), which document the recursions, the row maps
``xrow``/``crow`` and the adjoint formulas (the envelope and the FIR are no recursions:
their kernels run their lanes along time, see their modules). The sample-rate recursions
run in float64 whatever the tensor dtype; their forwards keep the states at the start of
every block of :data:`~lhotse_amt.kernels.autodiff.CHECKPOINT_BLOCK` samples (the
checkpoints) and each backward runs from the last block to the first, recomputing the
block from its checkpoint into a float64 scratch buffer (rows innermost, so the accesses
of a program are coalesced), then running the adjoint recursion back over it. No host loop
over blocks or time: one launch per call, whatever the signal's length (shared program
structure: :mod:`lhotse_amt.kernels.triton_common`).

Importing this module never fails: without Triton (or without a CUDA device)
:func:`available` is ``False``. Set ``TRITON_INTERPRET=1`` to run the kernels on CPU
tensors with Triton's interpreter (tests).
"""

from __future__ import annotations

from .triton_adaptation import adaptation_backward, adaptation_forward
from .triton_agc import agc_backward, agc_forward
from .triton_common import BLOCK_ROWS, available, interpreted
from .triton_envelope import envelope_backward_direct, envelope_backward_finish, envelope_forward
from .triton_fir import fir_backward, fir_forward
from .triton_ihc_paulick import ihc_paulick_backward, ihc_paulick_forward
from .triton_resonator import resonator_backward, resonator_forward
from .triton_sos import sos_backward, sos_forward

__all__ = [
    "BLOCK_ROWS",
    "available",
    "interpreted",
    "sos_forward",
    "sos_backward",
    "resonator_forward",
    "resonator_backward",
    "adaptation_forward",
    "adaptation_backward",
    "ihc_paulick_forward",
    "ihc_paulick_backward",
    "agc_forward",
    "agc_backward",
    "envelope_forward",
    "envelope_backward_direct",
    "envelope_backward_finish",
    "fir_forward",
    "fir_backward",
]
