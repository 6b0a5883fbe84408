"""The frame definition of every ``amt-*`` sample-rate feature: frame means over hops.

Frame ``j`` of a signal of ``n`` samples is the mean of samples ``[j * hop, (j + 1) * hop)``,
cut at the end of the signal (``[j * hop, min((j + 1) * hop, n))``); a frame without
samples is 0. With ``num_frames = lhotse.utils.compute_num_frames_from_samples(n, ...)``
these are the rows of the extractors' feature matrices (``pooling="rms"``: the square root
of the frame means of the squared signal).

:func:`frame_mean` is the one implementation in torch (differentiable); the compiled
kernels that pool inside their sample loop (``lhotse_amt.ops.fused``) implement the same
definition and are compared with this function by the tests.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._validation import check_signal

__all__ = ["frame_mean"]


def frame_mean(x: Tensor, hop: int, num_frames: int, lengths: Tensor | None = None) -> Tensor:
    """Means of ``x`` over consecutive hops of ``hop`` samples (the frame definition).

    Args:
        x: ``(..., T)`` signal (``(B, ..., T)`` with ``lengths``).
        hop: samples per frame, ``>= 1``.
        num_frames: frames to return, ``>= 0``; frames past the end of the signal are 0.
        lengths: optional ``(B,)`` integer tensor ``>= 0``, the valid samples of each item
            of a padded batch (samples at or after ``lengths[b]`` are not used).

    Returns:
        ``(..., num_frames)`` in the dtype of ``x``: frame ``j`` is the mean of samples
        ``[j * hop, min((j + 1) * hop, n))`` (``n = T`` or ``lengths[b]``), 0 where that
        range is empty.
    """
    if isinstance(hop, bool) or not isinstance(hop, int) or hop < 1:
        raise ValueError(f"hop must be an integer >= 1, got {hop!r}")
    if isinstance(num_frames, bool) or not isinstance(num_frames, int) or num_frames < 0:
        raise ValueError(f"num_frames must be an integer >= 0, got {num_frames!r}")
    # metadata only (the extractors pool long signals through this): no scan of the values
    check_signal(x, 0, None, name="x", allow_empty=True, finite=False)
    if lengths is not None and not (
        isinstance(lengths, Tensor)
        and not (lengths.is_floating_point() or lengths.is_complex() or lengths.dtype == torch.bool)
    ):
        raise TypeError(f"lengths must be an integer tensor (B,) or None, got {lengths!r}")
    T = x.shape[-1]
    span = num_frames * hop
    if lengths is None:
        nfull = min(num_frames, T // hop)
        full = x[..., : nfull * hop].reshape(*x.shape[:-1], nfull, hop).mean(-1)
        if nfull == num_frames:  # every frame full: one reshape
            return full
        parts = [full]
        if T > nfull * hop:  # the frame cut short by the end of the signal
            parts.append(x[..., nfull * hop :].mean(-1, keepdim=True))
        rest = num_frames - nfull - (len(parts) - 1)
        if rest:
            parts.append(x.new_zeros((*x.shape[:-1], rest)))
        return torch.cat(parts, -1)
    if lengths.dim() != 1 or lengths.shape[0] != x.shape[0]:
        raise ValueError(
            f"lengths must be (B,) with B = {x.shape[0]} (the batch of x), got "
            f"{tuple(lengths.shape)}"
        )
    if bool((lengths < 0).any()):  # (B,) integers: a negative count would give 0 frames
        raise ValueError(f"lengths must be >= 0, got {lengths.tolist()}")
    n = lengths.to(x.device).reshape(-1, *([1] * (x.dim() - 1)))
    if span > T:
        x = torch.nn.functional.pad(x, (0, span - T))
    else:
        x = x[..., :span]
    t = torch.arange(span, device=x.device)
    valid = (t < n).to(x.dtype)  # (..., span) broadcast against x
    s = (x * valid).reshape(*x.shape[:-1], num_frames, hop).sum(-1)
    cnt = valid.reshape(*valid.shape[:-1], num_frames, hop).sum(-1)
    return s / cnt.clamp(min=1.0)
