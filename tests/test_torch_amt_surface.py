"""The torch_amt surface of lhotse_amt: the 12 classes the torch_amt documentation defines
(modulation filterbanks, complete models, IHC models) are importable from ``lhotse_amt``
with the documented constructor parameters in the documented order, the Fast* classes
give the numbers of their exact counterparts, and the documentation's code examples
(``tests/data/torch_amt_examples/``) run with ``lhotse_amt`` in place of ``torch_amt``.
Every example that does not, and every documented default that differs, must be listed
(by id) in ``docs/torch_amt_compat.md`` with its reason."""

from __future__ import annotations

import ast
import contextlib
import inspect
import io
import re
import traceback
from pathlib import Path

import pytest
import torch

import lhotse_amt

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = Path(__file__).resolve().parent / "data" / "torch_amt_examples"
COMPAT = ROOT / "docs" / "torch_amt_compat.md"

#: Constructor signatures as the torch_amt API documentation gives them.
DOCUMENTED = {
    "ModulationFilterbank": "fs, fc, Q=2.0, max_mfc=150.0, lp_cutoff=2.5, att_factor=1.0, "
    "use_upper_limit=False, preset=None, filter_type='efilt', learnable=False, "
    "dtype=torch.float32",
    "FastModulationFilterbank": "*args, tolerance=2, **kwargs",
    "King2019ModulationFilterbank": "fs, mflow=2.0, mfhigh=150.0, qfactor=1.0, nmod=None, "
    "learnable=False, dtype=torch.float32",
    "FastKing2019ModulationFilterbank": "fs, mflow=2.0, mfhigh=150.0, qfactor=1.0, nmod=None, "
    "learnable=False, dtype=torch.float32, ir_length_ratio=1.0",
    "Dau1997": "fs, flow=80.0, fhigh=8000.0, learnable=False, return_stages=False, "
    "dtype=torch.float32, filterbank_kwargs=None, ihc_kwargs=None, adaptation_kwargs=None, "
    "modulation_kwargs=None",
    "Glasberg2002": "fs=32000, learnable=False, return_stages=False, multi_fft_kwargs=None, "
    "erb_kwargs=None, excitation_kwargs=None, specific_loudness_kwargs=None, "
    "loudness_integration_kwargs=None",
    "Moore2016": "fs=32000, learnable=False, return_stages=False, dtype=torch.float32, "
    "outer_middle_ear_kwargs=None, spectrum_kwargs=None, excitation_kwargs=None, "
    "specific_loudness_kwargs=None, temporal_integration_kwargs=None, "
    "binaural_loudness_kwargs=None, ltl_agc_kwargs=None",
    "King2019": "fs, flow=80.0, fhigh=8000.0, basef=None, compression_type='brokenstick', "
    "compression_n=0.3, compression_knee_db=30.0, dboffset=100.0, adt_hp_fc=3.0, "
    "adt_hp_order=1, mflow=2.0, mfhigh=150.0, modbank_nmod=None, modbank_qfactor=1.0, "
    "lp_150hz=False, subfs=None, learnable=False, return_stages=False, dtype=torch.float32, "
    "filterbank_kwargs=None, compression_kwargs=None, ihc_kwargs=None, adaptation_kwargs=None, "
    "modulation_kwargs=None",
    "Osses2021": "fs, flow=80.0, fhigh=8000.0, phase_type='minimum', learnable=False, "
    "return_stages=False, dtype=torch.float32, headphone_kwargs=None, middleear_kwargs=None, "
    "filterbank_kwargs=None, ihc_kwargs=None, adaptation_kwargs=None, modulation_kwargs=None",
    "Paulick2024": "fs=44100, flow=125.0, fhigh=8000.0, n_channels=50, use_outerear=True, "
    "learnable=False, return_stages=False, filter_type='efilt', dtype=torch.float32, "
    "outerear_kwargs=None, drnl_kwargs=None, ihc_kwargs=None, adaptation_kwargs=None, "
    "modulation_kwargs=None",
    "IHCEnvelope": "fs, cutoff=None, order=1, method='dau1996', learnable=False, "
    "dtype=torch.float32",
    "IHCPaulick2024": "fs, learnable=False, dtype=torch.float32",
}

#: ``forward`` argument names as documented.
DOCUMENTED_FORWARD = {name: "x" for name in DOCUMENTED}
DOCUMENTED_FORWARD.update(Glasberg2002="audio", Moore2016="audio", IHCPaulick2024="vel")

_NO_DEFAULT = object()


def _parse_documented(name: str) -> list[tuple[str, object]]:
    """``[(parameter, default or _NO_DEFAULT)]`` of a documented signature; a documented
    ``*args, ..., **kwargs`` stands for the parent class's parameters, followed by the
    keyword-only ones."""
    sig = DOCUMENTED[name]
    if sig.startswith("*args"):
        parent = name.removeprefix("Fast")
        return _parse_documented(parent) + _parse_documented_text(
            "*, " + sig.removeprefix("*args, ").removesuffix(", **kwargs")
        )
    return _parse_documented_text(sig)


def _parse_documented_text(sig: str) -> list[tuple[str, object]]:
    args = ast.parse(f"def f({sig}): pass").body[0].args
    out: list[tuple[str, object]] = []
    pos = args.args
    defaults = [_NO_DEFAULT] * (len(pos) - len(args.defaults)) + list(args.defaults)
    for a, d in zip(pos, defaults):
        out.append((a.arg, _eval_default(d)))
    for a, d in zip(args.kwonlyargs, args.kw_defaults):
        out.append((a.arg, _eval_default(d) if d is not None else _NO_DEFAULT))
    return out


def _eval_default(node: object) -> object:
    if node is _NO_DEFAULT:
        return node
    return eval(compile(ast.Expression(node), "<documented>", "eval"), {"torch": torch})


def _compat_ids() -> set[str]:
    """The ids (in backticks) in the first column of the tables of the compatibility
    document."""
    ids: set[str] = set()
    for line in COMPAT.read_text(encoding="utf-8").splitlines():
        if not line.startswith("|") or set(line) <= set("|-: "):
            continue
        first = line.split("|")[1]
        ids.update(re.findall(r"`([^`]+)`", first))
    return ids


def test_compat_document_lists_reasons() -> None:
    text = COMPAT.read_text(encoding="utf-8")
    rows = [r for r in text.splitlines() if r.startswith("| `")]
    assert rows, "no difference rows in docs/torch_amt_compat.md"
    for row in rows:
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        assert len(cells) >= 3 and all(cells[:3]), f"row without difference or reason: {row}"


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_documented_class_importable(name: str) -> None:
    cls = getattr(lhotse_amt, name)
    assert inspect.isclass(cls) and issubclass(cls, torch.nn.Module)
    assert name in lhotse_amt.__all__


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_constructor_documented_order(name: str) -> None:
    """The documented parameters come first, in the documented order and kind (positional
    or keyword-only); every added parameter is keyword-only and after them. Defaults that
    differ from the documented ones are listed in the compatibility document."""
    params = list(inspect.signature(getattr(lhotse_amt, name)).parameters.values())
    documented = _parse_documented(name)
    assert [p.name for p in params[: len(documented)]] == [n for n, _ in documented]
    doc_kwonly = {a.arg for a in _kwonly_of(name)}
    for p in params[: len(documented)]:
        want_kind = (
            inspect.Parameter.KEYWORD_ONLY
            if p.name in doc_kwonly
            else inspect.Parameter.POSITIONAL_OR_KEYWORD
        )
        assert p.kind == want_kind, f"{name}({p.name}) is {p.kind}, documented {want_kind}"
    for p in params[len(documented) :]:
        assert p.kind == inspect.Parameter.KEYWORD_ONLY, f"added {name}({p.name}) not kw-only"
    listed = _compat_ids()
    for p, (_, default) in zip(params, documented):
        ours = p.default if p.default is not inspect.Parameter.empty else _NO_DEFAULT
        if ours != default:
            assert f"{name}({p.name}=)" in listed, (
                f"{name}({p.name}=) default {ours!r} differs from the documented {default!r} "
                "and is not listed in docs/torch_amt_compat.md"
            )


def _kwonly_of(name: str) -> list[ast.arg]:
    sig = DOCUMENTED[name]
    if sig.startswith("*args"):
        sig = "*, " + sig.removeprefix("*args, ").removesuffix(", **kwargs")
    return ast.parse(f"def f({sig}): pass").body[0].args.kwonlyargs


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_forward_documented_argument(name: str) -> None:
    params = list(inspect.signature(getattr(lhotse_amt, name).forward).parameters)
    assert params[1] == DOCUMENTED_FORWARD[name]


#: Public methods the documentation gives each class (besides ``forward``/``extra_repr``).
DOCUMENTED_METHODS = {
    "FastModulationFilterbank": ["distribute_gradients"],
    "Dau1997": ["distribute_gradients"],
    "Osses2021": ["distribute_gradients"],
    "Glasberg2002": ["reset_state", "get_erb_frequencies", "compute_loudness_level"],
    "Paulick2024": [
        "roi_selection",
        "template_correlation",
        "compute_decision_variable",
        "make_decision",
        "detection_task",
        "discrimination_task",
    ],
}


@pytest.mark.parametrize("name", sorted(DOCUMENTED_METHODS))
def test_documented_methods_exist(name: str) -> None:
    cls = getattr(lhotse_amt, name)
    missing = [m for m in DOCUMENTED_METHODS[name] if not callable(getattr(cls, m, None))]
    assert not missing, f"{name} lacks the documented methods {missing}"


@pytest.mark.parametrize("name", ["Dau1997", "Osses2021"])
def test_distribute_gradients_keeps_exact_gradients(name: str) -> None:
    model = getattr(lhotse_amt, name)(
        fs=16000, flow=1000.0, fhigh=2000.0, learnable=True, dtype=torch.float64
    )
    x = torch.randn(1, 800, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    sum(y.square().sum() for y in model(x * 0.01)).backward()
    before = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    assert before
    model.distribute_gradients()
    for n, p in model.named_parameters():
        if n in before:
            torch.testing.assert_close(p.grad, before[n], rtol=0, atol=0)


#: Attributes the documentation gives each class.
DOCUMENTED_ATTRIBUTES = {
    "Dau1997": [
        "fs",
        "flow",
        "fhigh",
        "learnable",
        "return_stages",
        "dtype",
        "filterbank",
        "ihc",
        "adaptation",
        "modulation",
        "fc",
        "num_channels",
    ],
    "FastKing2019ModulationFilterbank": ["mfc", "sos_stack", "num_filters", "ir_length_ratio"],
    "FastModulationFilterbank": ["tolerance", "megabatch_map", "total_filters"],
    "Glasberg2002": [
        "fs",
        "learnable",
        "return_stages",
        "multi_fft",
        "erb_integration",
        "excitation_pattern",
        "specific_loudness",
        "loudness_integration",
    ],
    "IHCEnvelope": [
        "fs",
        "method",
        "cutoff",
        "order",
        "iterations",
        "b",
        "a",
        "learnable",
        "dtype",
    ],
    "IHCPaulick2024": [
        "fs",
        "learnable",
        "dtype",
        "scaling_factor",
        "Gmet_max",
        "x0",
        "s0",
        "s1",
        "EP",
        "Cm",
        "Gkf",
        "Gks",
        "Ekf",
        "Eks",
        "V_rest",
        "G_precharge",
        "precharge_duration",
    ],
    "King2019": [
        "fs",
        "flow",
        "fhigh",
        "dboffset",
        "compression_type",
        "learnable",
        "return_stages",
        "dtype",
        "filterbank",
        "compression",
        "ihc",
        "adaptation_filter",
        "lp150_filter",
        "modulation_filterbank",
        "fc",
        "mfc",
        "num_channels",
    ],
    "King2019ModulationFilterbank": ["mfc", "filters", "num_filters"],
    "ModulationFilterbank": [
        "fs",
        "fc",
        "Q",
        "max_mfc",
        "lp_cutoff",
        "att_factor",
        "use_upper_limit",
        "preset",
        "filter_type",
        "learnable",
        "num_channels",
        "use_lp150_prefilter",
        "b_lowpass",
        "a_lowpass",
        "b_lp150",
        "a_lp150",
        "mfc",
        "filter_coeffs",
    ],
    "Moore2016": [
        "fs",
        "learnable",
        "return_stages",
        "dtype",
        "outer_middle_ear",
        "spectrum",
        "excitation",
        "specific_loudness",
        "temporal_integration",
        "binaural_loudness",
        "ltl_agc_left",
        "ltl_agc_right",
    ],
    "Osses2021": [
        "fs",
        "flow",
        "fhigh",
        "phase_type",
        "learnable",
        "return_stages",
        "dtype",
        "headphone",
        "middleear",
        "filterbank",
        "ihc",
        "adaptation",
        "modulation",
        "fc",
        "num_channels",
    ],
    "Paulick2024": [
        "fs",
        "flow",
        "fhigh",
        "n_channels",
        "use_outerear",
        "learnable",
        "return_stages",
        "filter_type",
        "dtype",
        "outer_middle_ear",
        "drnl",
        "ihc",
        "adaptation",
        "modulation",
        "resampler",
        "fc",
        "num_channels",
        "resample_factor",
        "fs_resampled",
    ],
}


def _instance(name: str) -> torch.nn.Module:
    cls = getattr(lhotse_amt, name)
    if "ModulationFilterbank" in name and "King" not in name:
        return cls(16000, torch.linspace(100.0, 8000.0, 5))
    return cls(fs=44100 if name == "Paulick2024" else 16000)


@pytest.mark.parametrize("name", sorted(DOCUMENTED_ATTRIBUTES))
def test_documented_attributes(name: str) -> None:
    """Every documented attribute exists on an instance, or is listed (``Class.attribute``)
    in docs/torch_amt_compat.md with the lhotse_amt equivalent."""
    obj = _instance(name)
    wanted = list(DOCUMENTED_ATTRIBUTES[name])
    if name == "FastModulationFilterbank":  # documented to inherit its parent's attributes
        wanted += DOCUMENTED_ATTRIBUTES["ModulationFilterbank"]
    listed = _compat_ids()
    missing = [a for a in wanted if not hasattr(obj, a) and f"{name}.{a}" not in listed]
    assert not missing, f"{name} lacks documented attributes {missing}"
    stale = [a for a in wanted if hasattr(obj, a) and f"{name}.{a}" in listed]
    assert not stale, f"{name}: {stale} exist but are listed as missing"


def test_ihc_envelope_coefficients_are_one_butterworth() -> None:
    import scipy.signal

    for order, method in [(1, "dau1996"), (2, "lindemann"), (3, "breebaart2001")]:
        ihc = lhotse_amt.IHCEnvelope(16000, order=order, method=method, dtype=torch.float64)
        b, a = scipy.signal.butter(order, ihc.cutoff / 8000.0)
        torch.testing.assert_close(ihc.b, torch.from_numpy(b), rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(ihc.a, torch.from_numpy(a), rtol=1e-12, atol=1e-14)
    learn = lhotse_amt.IHCEnvelope(16000, learnable=True, dtype=torch.float64)
    assert learn.learnable and learn.dtype == torch.float64
    learn.b.sum().backward()
    assert learn.sos.grad is not None


def test_modulation_filterbank_documented_coefficients() -> None:
    fc = torch.linspace(100.0, 8000.0, 5)
    jep = lhotse_amt.ModulationFilterbank(16000, fc, preset="jepsen2008")
    dau = lhotse_amt.ModulationFilterbank(16000, fc, preset="dau1997")
    assert dau.b_lp150 is None and dau.a_lp150 is None
    assert jep.a_lowpass[0] == 1 and jep.a_lp150[0] == 1
    # unit gain at DC of both low-passes
    for b, a in [(jep.b_lowpass, jep.a_lowpass), (jep.b_lp150, jep.a_lp150)]:
        torch.testing.assert_close(b.sum() / a.sum(), torch.tensor(1.0, dtype=b.dtype))
    fast = lhotse_amt.FastModulationFilterbank(16000, fc, preset="jepsen2008")
    entries = fast.megabatch_map
    assert len(entries) == fast.total_filters
    assert [e["mfc"] for e in entries if e["channel"] == 4] == fast.mfc[4].tolist()


def test_ihc_paulick_forward_vel_keyword() -> None:
    ihc = lhotse_amt.IHCPaulick2024(fs=16000, dtype=torch.float64)
    vel = torch.randn(2, 3, 800, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(ihc(vel=vel * 1e-4), ihc(vel * 1e-4), rtol=0, atol=0)


@pytest.mark.parametrize("preset", ["dau1997", "jepsen2008"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fast_modulation_filterbank_equals_exact(preset: str, dtype: torch.dtype) -> None:
    fc = torch.linspace(100, 8000, 12)
    x = torch.randn(2, 12, 4000, generator=torch.Generator().manual_seed(1), dtype=dtype)
    exact = lhotse_amt.ModulationFilterbank(16000, fc, preset=preset, dtype=dtype)
    for tolerance in (1, 2, 3):
        fast = lhotse_amt.FastModulationFilterbank(
            16000, fc, preset=preset, dtype=dtype, tolerance=tolerance
        )
        assert fast.tolerance == tolerance
        for a, b in zip(fast(x), exact(x), strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert fast.total_filters == sum(len(m) for m in exact.mfc)


def test_fast_modulation_filterbank_learnable_gradients() -> None:
    fc = torch.linspace(500, 4000, 4)
    x = torch.randn(1, 4, 2000, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    kw = dict(fs=16000, fc=fc, preset="dau1997", learnable=True, dtype=torch.float64)
    exact, fast = lhotse_amt.ModulationFilterbank(**kw), lhotse_amt.FastModulationFilterbank(**kw)
    for m in (exact, fast):
        sum(y.square().sum() for y in m(x)).backward()
    fast.distribute_gradients()
    for (n, a), (_, b) in zip(fast.named_parameters(), exact.named_parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, msg=n)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fast_king2019_modulation_filterbank_equals_exact(dtype: torch.dtype) -> None:
    x = torch.randn(2, 5, 24000, generator=torch.Generator().manual_seed(3), dtype=dtype)
    exact = lhotse_amt.King2019ModulationFilterbank(48000, dtype=dtype)
    for ratio in (1.0, 0.5):
        fast = lhotse_amt.FastKing2019ModulationFilterbank(
            48000, dtype=dtype, ir_length_ratio=ratio
        )
        assert fast.ir_length_ratio == ratio
        torch.testing.assert_close(fast(x), exact(x), rtol=0, atol=0)
    assert fast.sos_stack.shape == (fast.num_filters, 2, 6)


def test_fast_classes_run_the_exact_path() -> None:
    """The Fast* classes run their exact counterpart's forward (one compiled pass over all
    channels and bands), so they are as fast as it, not an approximation of it (speed:
    ``benchmarks/``, never a timed test)."""
    assert lhotse_amt.FastModulationFilterbank.forward is lhotse_amt.ModulationFilterbank.forward
    assert (
        lhotse_amt.FastKing2019ModulationFilterbank.forward
        is lhotse_amt.King2019ModulationFilterbank.forward
    )


@pytest.mark.parametrize(
    ("cls", "kwargs", "field"),
    [
        ("FastModulationFilterbank", dict(fs=16000, fc=[1000.0], tolerance=-1), "tolerance"),
        ("FastModulationFilterbank", dict(fs=16000, fc=[1000.0], tolerance=1.5), "tolerance"),
        ("FastKing2019ModulationFilterbank", dict(fs=16000, ir_length_ratio=0.0), "ir_length"),
        ("FastKing2019ModulationFilterbank", dict(fs=16000, ir_length_ratio=2), "ir_length"),
    ],
)
def test_fast_classes_reject_bad_options(cls: str, kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        getattr(lhotse_amt, cls)(**kwargs)


# --------------------------------------------------------------------------- examples


def _load_examples(name: str) -> list[tuple[str, str, list[str], list[str]]]:
    """``[(id, title, code lines, expected output lines)]`` of one class's example file."""
    out: list[tuple[str, str, list[str], list[str]]] = []
    for line in (EXAMPLES / f"{name}.txt").read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            ex_id, title = line[3:].split(": ", 1)
            out.append((ex_id, title, [], []))
        elif line.startswith((">>>", "...")):
            out[-1][2].append(line[4:] if len(line) > 3 else "")
        elif out and line.strip():
            out[-1][3].append(line)
    return out


def _as_lhotse_amt(code: str) -> str:
    code = re.sub(
        r"^(\s*)from torch_amt(\.[\w.]+)? import", r"\1from lhotse_amt import", code, flags=re.M
    )
    return re.sub(
        r"^(\s*)import torch_amt\b", r"\1import lhotse_amt as torch_amt", code, flags=re.M
    )


#: Labels of printed values that are design quantities (counts, frequencies, rates):
#: compared with the documentation. Values computed from the examples' random signals
#: (levels, correlations, decision variables) are not.
_DESIGN_LABEL = re.compile(r"channel|frequenc|\bfc\b|\bmfc\b|rate|range|filters in", re.I)
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def _joined(printed: str) -> list[str]:
    """Printed lines with the continuation lines of a wrapped tensor joined on."""
    out: list[str] = []
    for line in printed.splitlines():
        if out and line.startswith(" ") and out[-1].count("[") > out[-1].count("]"):
            out[-1] += " " + line.strip()
        else:
            out.append(line)
    return out


def _numbers_match(want: str, got: str) -> bool:
    """The documented numbers (to the precision printed there; ``...`` elides the middle)
    against the printed ones."""

    def nums(text: str) -> list[tuple[float, float]]:
        vals = []
        for n in _NUMBER.findall(text):
            decimals = len(n.split(".")[1]) if "." in n and "e" not in n.lower() else 0
            vals.append((float(n), 0.5 * 10.0**-decimals + 1e-9))
        return vals

    have = [v for v, _ in nums(got)]
    if "..." in want:
        head, tail = (nums(part) for part in want.split("...", 1))
        pairs = list(zip(head, have)) + list(zip(tail[::-1], have[::-1]))
        if len(head) + len(tail) > len(have):
            return False
    else:
        pairs = list(zip(nums(want), have))
        if len(nums(want)) != len(have):
            return False
    return all(abs(w - h) <= tol * max(1.0, 1e-3 * abs(w) / tol) for (w, tol), h in pairs)


def _check_outputs(printed: str, expected: list[str]) -> None:
    """Documented shapes (``torch.Size``) must be printed as documented, documented stage
    names must be among the printed ones, and documented design values (channel counts,
    centre frequencies, rates) must be printed to the documented precision. Counts of
    learnable parameters and values of the random example signals are not compared."""
    lines = _joined(printed)
    for want in expected:
        want = want.split("  #")[0].strip()
        label = want.split(": ", 1)[0] if ": " in want else None
        if "torch.Size(" in want:
            assert want in lines, f"documented {want!r}, printed {lines}"
            continue
        m = re.match(r"(Available stages: )(\[.*\])$", want)
        if m:
            got = [g for g in lines if g.startswith(m.group(1))]
            assert got, f"no stage list printed; printed {lines}"
            have = set(ast.literal_eval(got[0][len(m.group(1)) :]))
            missing = set(ast.literal_eval(m.group(2))) - have
            assert not missing, f"stages {sorted(missing)} missing from {sorted(have)}"
            continue
        if label is None or "param" in label.lower() or not _DESIGN_LABEL.search(label):
            continue
        got = [g for g in lines if g.startswith(label + ": ")]
        assert got, f"documented {want!r}, nothing printed under that label: {lines}"
        value = want[len(label) + 2 :]
        assert _numbers_match(value, got[0][len(label) + 2 :]), (
            f"documented {want!r}, printed {got[0]!r}"
        )


def run_examples(name: str) -> dict[str, str]:
    """Runs a class's examples in order in one namespace; returns ``{id: failure}`` for
    every example that raises or prints other shapes/stages than documented."""
    failures: dict[str, str] = {}
    namespace: dict[str, object] = {"__name__": f"torch_amt_example_{name}"}
    torch.manual_seed(0)
    for ex_id, _, code, expected in _load_examples(name):
        buf = io.StringIO()
        try:
            with contextlib.redirect_stdout(buf), torch.random.fork_rng():
                exec(compile(_as_lhotse_amt("\n".join(code)), ex_id, "exec"), namespace)
            _check_outputs(buf.getvalue(), expected)
        except Exception as e:  # noqa: BLE001 - the failure is reported by id
            failures[ex_id] = f"{type(e).__name__}: {e}".splitlines()[0][:300] or (
                traceback.format_exc(limit=1)
            )
    return failures


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_documented_examples_run(name: str) -> None:
    """Each example of the documentation runs with lhotse_amt and prints the documented
    shapes, or it is listed (by id) in docs/torch_amt_compat.md; a listed example that
    does run must be taken off the list."""
    examples = _load_examples(name)
    assert examples, f"no examples stored for {name}"
    failures = run_examples(name)
    listed = _compat_ids()
    unlisted = {k: v for k, v in failures.items() if k not in listed}
    assert not unlisted, f"examples fail and are not in docs/torch_amt_compat.md: {unlisted}"
    stale = sorted(i for i, *_ in examples if i in listed and i not in failures)
    assert not stale, f"examples listed in docs/torch_amt_compat.md now run: {stale}"
