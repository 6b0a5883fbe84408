"""Argument checks of the public operator wrappers of :mod:`lhotse_amt.ops`: bad input
raises ``TypeError``/``ValueError`` naming the argument at the wrapper, instead of a
silently wrong result (an integer output, a truncated index) or an error from inside a
kernel or from torch without the argument's name; empty time axes give empty outputs."""

import pytest
import torch

from lhotse_amt import ops
from lhotse_amt.ops.ihc_paulick import IHC_STEP_KEYS

D = torch.float64
X = torch.linspace(-1.0, 1.0, 48, dtype=D).reshape(3, 16)
SOS = torch.tensor([[0.2, 0.4, 0.2, 1.0, -0.3, 0.1]], dtype=D)
POLE = torch.full((3,), 0.9 + 0.2j, dtype=torch.complex128)
GAIN = torch.full((3,), 0.1, dtype=D)
J = 5
A, M, ST = (torch.full((J,), v, dtype=D) for v in (0.99, 5.0, 0.1))
W = torch.ones(3, dtype=D)
CONSTS = torch.full((len(IHC_STEP_KEYS),), 0.5, dtype=D)
N = torch.tensor(0.3, dtype=D)
C3 = torch.ones(3, dtype=D)

CASES = {
    # sosfilt
    "sosfilt int x": (lambda: ops.sosfilt(X.long(), SOS), ValueError, "x must be a real"),
    "sosfilt float16 x": (lambda: ops.sosfilt(X.half(), SOS), ValueError, "x must have dtype"),
    "sosfilt int sos": (lambda: ops.sosfilt(X, SOS.long()), TypeError, "sos must be a real"),
    "sosfilt sos (6,)": (lambda: ops.sosfilt(X, SOS[0]), ValueError, r"sos must have shape"),
    "sosfilt sos (1, 5)": (lambda: ops.sosfilt(X, SOS[:, :5]), ValueError, "sos must have"),
    "sosfilt no section": (lambda: ops.sosfilt(X, SOS[:0]), ValueError, "one section"),
    "sosfilt a0 0": (lambda: ops.sosfilt(X, SOS * 0.0), ValueError, "a0"),
    "sosfilt sos lead": (
        lambda: ops.sosfilt(X, SOS.expand(2, 1, 6)),
        ValueError,
        r"x \(3,\), sos \(2,\)",
    ),
    "sosfilt zi (1, 3)": (
        lambda: ops.sosfilt(X, SOS, torch.zeros(1, 3, dtype=D)),
        ValueError,
        r"zi must have shape \(\.\.\., 1, 2\)",
    ),
    "sosfilt zi int": (
        lambda: ops.sosfilt(X, SOS, torch.zeros(1, 2, dtype=torch.long)),
        TypeError,
        "zi must be a real",
    ),
    "sosfilt sos list": (lambda: ops.sosfilt(X, SOS.tolist()), TypeError, "sos must be a torch"),
    "sosfilt 0-d x": (lambda: ops.sosfilt(X[0, 0], SOS), ValueError, "x must have at least 1"),
    # one_pole_cascade
    "cascade int x": (lambda: ops.one_pole_cascade(X.long(), POLE, GAIN, 2), ValueError, "x must"),
    "cascade int pole": (
        lambda: ops.one_pole_cascade(X, POLE.real.long(), GAIN, 2),
        TypeError,
        "pole must be a real floating or complex",
    ),
    "cascade gain number": (
        lambda: ops.one_pole_cascade(X, POLE, 0.1, 2),
        TypeError,
        "gain must be a torch",
    ),
    "cascade order 0": (lambda: ops.one_pole_cascade(X, POLE, GAIN, 0), ValueError, "order"),
    "cascade order True": (lambda: ops.one_pole_cascade(X, POLE, GAIN, True), TypeError, "order"),
    "cascade order 2.5": (lambda: ops.one_pole_cascade(X, POLE, GAIN, 2.5), TypeError, "order"),
    "cascade coefficient lead": (
        lambda: ops.one_pole_cascade(X, POLE[:2], GAIN[:2], 2),
        ValueError,
        r"x \(3,\), coefficients \(2,\)",
    ),
    "cascade real zi": (
        lambda: ops.one_pole_cascade(X, POLE, GAIN, 2, torch.zeros(3, 2, dtype=D)),
        TypeError,
        "zi must be a complex",
    ),
    "cascade zi order": (
        lambda: ops.one_pole_cascade(X, POLE, GAIN, 2, torch.zeros(3, 3, dtype=POLE.dtype)),
        ValueError,
        r"zi must have shape \(\.\.\., 2\)",
    ),
    "cascade float use_abs": (
        lambda: ops.one_pole_cascade(X, POLE, GAIN, 1, output="mixed", use_abs=GAIN),
        TypeError,
        "use_abs must be a bool",
    ),
    "cascade 2-d select": (
        lambda: ops.one_pole_cascade(X, POLE, GAIN, 1, select=torch.tensor([[0, 1]])),
        TypeError,
        "select must be a 1-d",
    ),
    "cascade float select": (
        lambda: ops.one_pole_cascade(X, POLE, GAIN, 1, select=torch.tensor([0.0])),
        TypeError,
        "select must be a 1-d",
    ),
    # adaptation_loops_raw
    "adaptation int x": (
        lambda: ops.adaptation_loops_raw(X.long(), A, M, 1e-5, True, ST),
        ValueError,
        "x must be a real",
    ),
    "adaptation int a": (
        lambda: ops.adaptation_loops_raw(X, A.long(), M, 1e-5, True, ST),
        TypeError,
        "a must be a real",
    ),
    "adaptation 0-d a": (
        lambda: ops.adaptation_loops_raw(X, A[0], M, 1e-5, True, ST),
        ValueError,
        r"a must have shape \(\.\.\., J\)",
    ),
    "adaptation no loop": (
        lambda: ops.adaptation_loops_raw(X, A[:0], M[:0], 1e-5, True, ST[:0]),
        ValueError,
        "at least one loop",
    ),
    "adaptation m loops": (
        lambda: ops.adaptation_loops_raw(X, A, M[:3], 1e-5, True, ST),
        ValueError,
        r"m must have shape \(\.\.\., 5\)",
    ),
    "adaptation state loops": (
        lambda: ops.adaptation_loops_raw(X, A, M, 1e-5, True, ST[:1]),
        ValueError,
        r"state must have shape \(\.\.\., 5\)",
    ),
    "adaptation state None": (
        lambda: ops.adaptation_loops_raw(X, A, M, 1e-5, True, None),
        TypeError,
        "state must be a torch",
    ),
    "adaptation a lead": (
        lambda: ops.adaptation_loops_raw(X, A.expand(4, J), M, 1e-5, True, ST),
        ValueError,
        r"x \(3,\), a \(4,\)",
    ),
    "adaptation minlvl <= 0": (
        lambda: ops.adaptation_loops_raw(X, A, M, -1.0, True, ST),
        ValueError,
        "minlvl must be > 0",
    ),
    "adaptation minlvl str": (
        lambda: ops.adaptation_loops_raw(X, A, M, "1e-5", True, ST),
        TypeError,
        "minlvl must be a real number",
    ),
    "adaptation use_limit str": (
        lambda: ops.adaptation_loops_raw(X, A, M, 1e-5, "no", ST),
        TypeError,
        "use_limit must be True or False",
    ),
    # row_map
    "row_map no broadcast": (
        lambda: ops.row_map((3,), torch.Size((4,)), X.device),
        ValueError,
        r"shape \(3,\), lead \(4,\)",
    ),
    "row_map more dims": (
        lambda: ops.row_map((2, 3), torch.Size((3,)), X.device),
        ValueError,
        "does not broadcast to lead",
    ),
    # broken_stick
    "broken_stick int x": (lambda: ops.broken_stick(X.long(), N, 0.1), ValueError, "x must be"),
    "broken_stick float16 x": (lambda: ops.broken_stick(X.half(), N, 0.1), ValueError, "dtype"),
    "broken_stick number exponent": (
        lambda: ops.broken_stick(X, 0.3, 0.1),
        TypeError,
        "exponent must be a torch",
    ),
    "broken_stick int exponent": (
        lambda: ops.broken_stick(X, torch.tensor(1), 0.1),
        TypeError,
        "exponent must be a real",
    ),
    "broken_stick infinite knee": (
        lambda: ops.broken_stick(X, N, float("inf")),
        ValueError,
        "knee must be a positive amplitude",
    ),
    "broken_stick str knee": (lambda: ops.broken_stick(X, N, "0.1"), TypeError, "knee must be"),
    "broken_stick bool knee": (lambda: ops.broken_stick(X, N, True), TypeError, "knee must be"),
    # drnl_compression
    "drnl int u": (lambda: ops.drnl_compression(X.long(), C3, C3, 0.25), ValueError, "u must"),
    "drnl float16 u": (lambda: ops.drnl_compression(X.half(), C3, C3, 0.25), ValueError, "u must"),
    "drnl int a": (
        lambda: ops.drnl_compression(X, C3.long(), C3, 0.25),
        TypeError,
        "a must be a real",
    ),
    "drnl complex b": (
        lambda: ops.drnl_compression(X, C3, C3.to(torch.complex128), 0.25),
        TypeError,
        "b must be a real",
    ),
    "drnl number a": (lambda: ops.drnl_compression(X, 1.0, C3, 0.25), TypeError, "a must be"),
    "drnl str c": (lambda: ops.drnl_compression(X, C3, C3, "0.25"), TypeError, "c must be"),
    "drnl nan c": (lambda: ops.drnl_compression(X, C3, C3, float("nan")), ValueError, "c must"),
    "drnl int c": (
        lambda: ops.drnl_compression(X, C3, C3, torch.tensor(1)),
        TypeError,
        "c must be a real",
    ),
    # rms_envelope
    "envelope float16 x": (lambda: ops.rms_envelope(X.half(), [0]), ValueError, "x must have"),
    "envelope float band": (lambda: ops.rms_envelope(X, [0.5]), TypeError, r"bands\[0\] must"),
    "envelope bool band": (lambda: ops.rms_envelope(X, [True]), TypeError, r"bands\[0\] must"),
    "envelope str bands": (lambda: ops.rms_envelope(X, "01"), TypeError, "bands must be"),
    "envelope int bands": (lambda: ops.rms_envelope(X, 1), TypeError, "bands must be"),
    "envelope float tensor bands": (
        lambda: ops.rms_envelope(X, torch.tensor([0.0])),
        TypeError,
        "bands must be",
    ),
    # strided_fir
    "fir float16 x": (lambda: ops.strided_fir(X.half(), W, 0, 2, 4), ValueError, "x must have"),
    "fir float16 w": (lambda: ops.strided_fir(X, W.half(), 0, 2, 4), ValueError, "w must have"),
    "fir no tap": (lambda: ops.strided_fir(X, W[:0], 0, 2, 4), ValueError, "at least one tap"),
    "fir float stride": (lambda: ops.strided_fir(X, W, 0, 2.7, 4), TypeError, "stride must"),
    "fir float start": (lambda: ops.strided_fir(X, W, 1.5, 2, 4), TypeError, "start must"),
    "fir float n_out": (lambda: ops.strided_fir(X, W, 0, 2, 3.9), TypeError, "n_out must"),
    "fir bool stride": (lambda: ops.strided_fir(X, W, 0, True, 4), TypeError, "stride must"),
    "fir str stride": (lambda: ops.strided_fir(X, W, 0, "2", 4), TypeError, "stride must"),
    # ihc_paulick_recursion
    "ihc int x": (lambda: ops.ihc_paulick_recursion(X.long(), CONSTS), ValueError, "x must"),
    "ihc float16 x": (lambda: ops.ihc_paulick_recursion(X.half(), CONSTS), ValueError, "x must"),
    "ihc int consts": (
        lambda: ops.ihc_paulick_recursion(X, CONSTS.long()),
        TypeError,
        "consts must be a real",
    ),
    "ihc 0-d consts": (lambda: ops.ihc_paulick_recursion(X, CONSTS[0]), ValueError, "12 entries"),
    "ihc consts list": (
        lambda: ops.ihc_paulick_recursion(X, CONSTS.tolist()),
        TypeError,
        "consts must be a torch",
    ),
    "ihc consts lead": (
        lambda: ops.ihc_paulick_recursion(X, CONSTS.expand(4, 12)),
        ValueError,
        r"x \(3,\), consts \(4,\)",
    ),
    "ihc str constant": (
        lambda: ops.ihc_paulick_recursion(X, {**dict.fromkeys(IHC_STEP_KEYS, 0.5), "k": "a"}),
        TypeError,
        r"consts\['k'\] must be a real number",
    ),
    "ihc constant lead": (
        lambda: ops.ihc_paulick_recursion(
            X, {**dict.fromkeys(IHC_STEP_KEYS, 0.5), "k": torch.ones(2, dtype=D), "x0": C3}
        ),
        ValueError,
        r"consts\['x0'\] \(3,\).*consts\['k'\] \(2,\)",
    ),
    "ihc int state": (
        lambda: ops.ihc_paulick_recursion(X, CONSTS, torch.zeros(3, dtype=torch.long)),
        TypeError,
        "state must be a real",
    ),
    "ihc number state": (
        lambda: ops.ihc_paulick_recursion(X, CONSTS, 0.0),
        TypeError,
        "state must be a torch",
    ),
    "ihc state lead": (
        lambda: ops.ihc_paulick_recursion(X, CONSTS, torch.zeros(4, dtype=D)),
        ValueError,
        r"state \(4,\)",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_argument_raises_naming_it(case):
    call, error, match = CASES[case]
    with pytest.raises(error, match=match):
        call()


ONES = {"sosfilt": (3, 1, 2), "one_pole_cascade": (3, 2), "ihc_paulick_recursion": (3,)}
EMPTY = {
    "sosfilt": lambda x, z: ops.sosfilt(x, SOS, z),
    "one_pole_cascade": lambda x, z: ops.one_pole_cascade(x, POLE, GAIN, 2, z.to(POLE.dtype)),
    "adaptation_loops_raw": lambda x, z: ops.adaptation_loops_raw(x, A, M, 1e-5, True, z),
    "ihc_paulick_recursion": lambda x, z: ops.ihc_paulick_recursion(x, CONSTS, z),
}


@pytest.mark.parametrize("op", list(EMPTY))
def test_empty_time_axis_passes_the_state_through(op):
    z = torch.linspace(0.1, 0.9, 15, dtype=D)[: torch.Size(ONES.get(op, (3, J))).numel()]
    z = z.reshape(ONES.get(op, (3, J)))
    y, zf = EMPTY[op](X[:, :0], z)
    assert y.shape == (3, 0)
    assert torch.equal(zf, z.to(zf.dtype))


def test_envelope_of_an_empty_batch_is_empty():
    x = X.reshape(1, 3, 16)[:0]
    assert ops.rms_envelope(x, [0]).shape == (0, 3, 16)


def test_envelope_takes_integer_tensor_bands():
    x = X.reshape(1, 3, 16)
    assert torch.equal(ops.rms_envelope(x, torch.tensor([0, 2])), ops.rms_envelope(x, [0, 2]))
