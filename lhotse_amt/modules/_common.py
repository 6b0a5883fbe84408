"""What the stage modules share: coefficients stored as buffers or learnable parameters, and
the channel count of the filterbanks."""

from __future__ import annotations

import inspect
from typing import TypeVar

from torch import Tensor, nn

from .._validation import check_bool

__all__ = ["ChannelBank", "extends_parent_signature", "register_coefficients"]

_T = TypeVar("_T", bound=type)


def register_coefficients(
    module: nn.Module, learnable: bool, *, persistent: bool = True, **tensors: Tensor
) -> None:
    """Register each of ``tensors`` on ``module`` under its keyword: an ``nn.Parameter``
    with ``learnable`` (trained with the model), else a buffer (moves with ``.to()``; in
    the ``state_dict`` if ``persistent``). ``learnable`` must be True or False."""
    learnable = check_bool("learnable", learnable)
    for name, t in tensors.items():
        if learnable:
            setattr(module, name, nn.Parameter(t))
        else:
            module.register_buffer(name, t, persistent=persistent)


class ChannelBank(nn.Module):
    """Base of the filterbanks whose channels are set by the centre frequencies ``fc``
    (Hz, ``(C,)``, a buffer or parameter)."""

    fc: Tensor

    @property
    def num_channels(self) -> int:
        """Number of channels ``C``."""
        return int(self.fc.numel())


def extends_parent_signature(cls: _T) -> _T:
    """Class decorator for a subclass whose ``__init__(self, *args, <keyword-only options>,
    **kwargs)`` passes ``args``/``kwargs`` on to its parent's ``__init__``: its signature (as
    :func:`inspect.signature` and ``help`` show it) becomes the parent's parameters with the
    subclass's keyword-only options before the parent's keyword-only ones."""
    own = inspect.signature(cls.__init__).parameters.values()
    parent = inspect.signature(cls.__mro__[1].__init__)
    kw = inspect.Parameter.KEYWORD_ONLY
    params = [p for p in parent.parameters.values() if p.kind != kw]
    params += [p for p in own if p.kind == kw]
    params += [p for p in parent.parameters.values() if p.kind == kw]
    cls.__init__.__signature__ = parent.replace(parameters=params)  # type: ignore[attr-defined]
    return cls
