"""Input validation: the shared helpers (``lhotse_amt._validation``), every extractor config
field, the extractors' input handling and level settings, the models' constructors and
``stream``, and the public functional blocks. Each bad input must raise the stated error type
with a message naming the field or problem; accepted spellings must give the same result."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from lhotse.features.base import FEATURE_EXTRACTORS, FeatureExtractor

import lhotse_amt  # noqa: F401  (registers the extractors)
from lhotse_amt import _validation as V
from lhotse_amt.features.base import AuditoryConfig

NAMES = sorted(n for n in FEATURE_EXTRACTORS if n.startswith("amt-"))
HAS_CUDA = torch.cuda.is_available()


def config_of(name: str, **overrides):
    cls = FEATURE_EXTRACTORS[name]
    cfg = cls.test_config() if hasattr(cls, "test_config") else cls.config_type()
    return dataclasses.replace(cfg, **overrides)


def extractor(name: str, **overrides):
    return FEATURE_EXTRACTORS[name](config_of(name, **overrides))


def noise(ex, seconds: float = 0.1, level_db: float = 65.0, seed: int = 0) -> np.ndarray:
    sr = ex.config.sampling_rate
    n = int(round(seconds * sr))
    rng = np.random.default_rng(seed)
    a = 10 ** ((level_db - ex.config.full_scale_db_spl) / 20)
    return (rng.standard_normal((ex.input_channels, n)) * a).astype(np.float32)


# ------------------------------------------------------------------------------------ helpers
@pytest.mark.parametrize(
    "value, err, match",
    [
        (True, TypeError, "real number"),
        ("1.0", TypeError, "real number"),
        (None, TypeError, "real number"),
        (float("nan"), ValueError, "finite"),
        (float("inf"), ValueError, "finite"),
        (-1.0, ValueError, "> 0"),
        (0, ValueError, "> 0"),
    ],
)
def test_check_positive_finite_rejects(value, err, match):
    with pytest.raises(err, match=match) as e:
        V.check_positive_finite("frame_shift", value)
    assert "frame_shift" in str(e.value) and repr(value) in str(e.value)


def test_number_helpers_accept_ints_and_numpy_scalars():
    assert V.check_positive_finite("x", 2) == 2.0
    assert isinstance(V.check_positive_finite("x", np.float32(0.5)), float)
    assert V.check_int("n", np.int64(3)) == 3 and type(V.check_int("n", np.int64(3))) is int
    assert V.check_rate("fs", 16000.0, integral=True) == 16000
    assert V.check_rate("fs", np.int32(8000)) == 8000.0
    assert V.check_bool("b", np.bool_(True)) is True
    assert V.check_choice("c", None, ("a", None)) is None


@pytest.mark.parametrize(
    "fn, err, match",
    [
        (lambda: V.check_int("channel", 1.5), TypeError, r"channel must be an integer, got 1\.5"),
        (lambda: V.check_int("channel", True), TypeError, "channel must be an integer"),
        (lambda: V.check_int("n", 0, min=1), ValueError, "n must be >= 1, got 0"),
        (lambda: V.check_rate("fs", 0), ValueError, "fs must be a finite sampling rate > 0"),
        (lambda: V.check_rate("fs", "16000"), TypeError, "fs must be a sampling rate"),
        (lambda: V.check_rate("fs", 1e9), ValueError, "<= 1e\\+06 Hz"),
        (lambda: V.check_rate("fs", 16000.5, integral=True), ValueError, "whole number"),
        (lambda: V.check_bool("downmix", "no"), TypeError, "downmix must be True or False"),
        (lambda: V.check_bool("downmix", 1), TypeError, "downmix must be True or False"),
        (lambda: V.check_choice("pooling", "max", ("mean", "rms")), ValueError, "'max'"),
        (lambda: V.check_choice("pooling", 3, ("mean", "rms")), TypeError, "pooling must be"),
        (lambda: V.check_level_db("L", 1e6), ValueError, "L must be >= -50 dB SPL"),
        (lambda: V.check_dtype("dtype", "float32"), TypeError, "torch.dtype"),
        (lambda: V.check_dtype("dtype", torch.float16), ValueError, "float16"),
        (lambda: V.check_kwargs("ihc_kwargs", [1]), TypeError, "ihc_kwargs must be a dict"),
        (lambda: V.check_band(100.0, 50.0), ValueError, "flow must be below fhigh"),
        (lambda: V.check_device("device", "gpu0"), ValueError, "not a valid torch device"),
        (lambda: V.check_device("device", 0), TypeError, "device string"),
    ],
)
def test_helpers_reject_with_named_field(fn, err, match):
    with pytest.raises(err, match=match):
        fn()


@pytest.mark.skipif(HAS_CUDA, reason="needs a machine without CUDA")
def test_check_device_cuda_without_cuda():
    with pytest.raises(ValueError, match='CUDA is not available.*device="cpu"'):
        V.check_device("device", "cuda")


@pytest.mark.parametrize(
    "x, err, match",
    [
        (np.zeros(8, np.float32), TypeError, "must be a torch.Tensor"),
        (torch.zeros(8, dtype=torch.int16), ValueError, "floating point"),
        (torch.zeros(8, dtype=torch.complex64), ValueError, "floating point"),
        (torch.zeros(1, 2, 8), ValueError, "1 to 2 dimensions"),
        (torch.zeros(3), ValueError, "too short: 3 samples, need at least 4"),
        (torch.zeros(0, 8), ValueError, "empty batch"),
        (torch.tensor([0.0, float("nan"), 0.0, 0.0]), ValueError, "NaN or infinite"),
    ],
)
def test_check_signal(x, err, match):
    with pytest.raises(err, match=match):
        V.check_signal(x, min_samples=4, name="x")


def test_check_signal_dtypes():
    x = torch.zeros(8, dtype=torch.float16)
    with pytest.raises(ValueError, match="x must have dtype torch.float32 or torch.float64"):
        V.check_signal(x, name="x", dtypes=(torch.float32, torch.float64))
    y = torch.zeros(8, dtype=torch.float64)
    assert V.check_signal(y, name="x", dtypes=(torch.float32, torch.float64)) is y


@pytest.mark.parametrize(
    "value, kwargs, err, match",
    [
        ([1.0] * 6, {}, TypeError, "sos must be a torch.Tensor, got list"),
        (torch.zeros(2, 6, dtype=torch.long), {}, TypeError, "real floating tensor, got dtype"),
        (torch.zeros(2, 6, dtype=torch.bool), {}, TypeError, "real floating tensor"),
        (torch.zeros(2, 6, dtype=torch.complex64), {}, TypeError, "real floating tensor"),
        (torch.zeros(2, 5), {"trailing": (6,)}, ValueError, r"shape \(\.\.\., 6\), got \(2, 5\)"),
        (torch.zeros(6), {"trailing": (2, 6)}, ValueError, r"got \(6,\)"),
        (torch.zeros(()), {"min_dim": 1}, ValueError, "must have shape"),
        (None, {}, TypeError, "must be a torch.Tensor, got None"),
        (torch.zeros(3), {"real_ok": False, "complex_ok": True}, TypeError, "complex tensor"),
    ],
)
def test_check_tensor_rejects(value, kwargs, err, match):
    with pytest.raises(err, match=match):
        V.check_tensor("sos", value, **kwargs)


def test_check_tensor_accepts():
    sos = torch.zeros(3, 2, 6, dtype=torch.float64)
    assert V.check_tensor("sos", sos, trailing=(2, 6)) is sos
    pole = torch.zeros(4, dtype=torch.complex128)
    assert V.check_tensor("pole", pole, real_ok=False, complex_ok=True) is pole
    assert V.check_tensor("zi", None, allow_none=True) is None


def test_check_broadcast_names_every_shape():
    assert V.check_broadcast(("x", (3, 1)), ("sos", (4,))) == torch.Size([3, 4])
    with pytest.raises(ValueError, match=r"do not broadcast: x \(3,\), sos \(2,\)"):
        V.check_broadcast(("x", (3,)), ("sos", (2,)))


# ------------------------------------------------------------------------------------ configs
def _config_classes():
    return sorted({FEATURE_EXTRACTORS[n].config_type for n in NAMES}, key=lambda c: c.__name__)


@pytest.mark.parametrize("cls", _config_classes(), ids=lambda c: c.__name__)
def test_every_config_field_is_type_checked(cls):
    base = cls()
    for f in dataclasses.fields(cls):
        with pytest.raises(TypeError, match=f.name):
            dataclasses.replace(base, **{f.name: object()})
        d = base.to_dict()
        d[f.name] = [1, 2]  # list: no field accepts it
        with pytest.raises(TypeError, match=f.name):
            cls.from_dict(d)


@pytest.mark.parametrize(
    "field, value, err, match",
    [
        ("frame_shift", "0.01", TypeError, "frame_shift must be a real number"),
        ("sampling_rate", "16000", TypeError, "sampling_rate must be a sampling rate"),
        ("sampling_rate", True, TypeError, "sampling_rate"),
        ("channel", 1.5, TypeError, "channel must be an integer"),
        ("downmix", "no", TypeError, "downmix must be True or False"),
        ("sampling_rate", 0, ValueError, "sampling_rate must be a finite sampling rate > 0"),
        ("sampling_rate", -16000, ValueError, "sampling_rate"),
        ("sampling_rate", 16000.5, ValueError, "whole number"),
        ("frame_shift", float("nan"), ValueError, "frame_shift must be a finite number"),
        ("frame_shift", float("inf"), ValueError, "frame_shift must be a finite number"),
        ("frame_shift", 0.0, ValueError, "frame_shift must be > 0"),
        ("frame_shift", -0.01, ValueError, "frame_shift must be > 0"),
        ("frame_shift", 0.00001, ValueError, "positive integer number of samples"),
        ("chunk_duration", float("nan"), ValueError, "chunk_duration"),
        ("chunk_duration", 0, ValueError, "chunk_duration must be > 0"),
        ("full_scale_db_spl", float("nan"), ValueError, "full_scale_db_spl must be a finite"),
        ("full_scale_db_spl", float("inf"), ValueError, "full_scale_db_spl must be a finite"),
        ("full_scale_db_spl", 1000.0, ValueError, "full_scale_db_spl must be >= -50"),
        ("full_scale_db_spl", -400.0, ValueError, "full_scale_db_spl must be >= -50"),
        ("target_level_db_spl", float("nan"), ValueError, "target_level_db_spl"),
        ("target_level_db_spl", 500.0, ValueError, "target_level_db_spl must be >= -50"),
        ("dtype", "float16", ValueError, "dtype must be one of"),
        ("pooling", "max", ValueError, "pooling must be one of"),
        ("device", "nonsense", ValueError, "not a valid torch device"),
    ],
)
@pytest.mark.parametrize("name", NAMES)
def test_common_config_fields(name, field, value, err, match):
    cls = FEATURE_EXTRACTORS[name].config_type
    with pytest.raises(err, match=match):
        cls(**{field: value})
    d = cls().to_dict()
    d[field] = value
    with pytest.raises(err, match=match):
        cls.from_dict(d)
    # a valid config mutated afterwards is checked again when the extractor is built
    cfg = cls()
    setattr(cfg, field, value)
    with pytest.raises(err, match=match):
        FEATURE_EXTRACTORS[name](cfg)


@pytest.mark.parametrize(
    "name, field, value, err, match",
    [
        ("amt-dau1997", "flow", float("nan"), ValueError, "flow must be a finite"),
        ("amt-dau1997", "fhigh", 50.0, ValueError, "flow must be below fhigh"),
        ("amt-dau1997", "preset", "amt-2", ValueError, "preset must be one of"),
        ("amt-dau1997", "use_upper_limit", "yes", TypeError, "use_upper_limit"),
        ("amt-dau1997", "adaptation_limit", -1.0, ValueError, "adaptation_limit must be >= 0"),
        ("amt-dau1997", "stage", "ihc", ValueError, "stage must be one of"),
        ("amt-osses2021", "compensation", "half", ValueError, "compensation must be one of"),
        ("amt-osses2021", "att_factor", 0.0, ValueError, "att_factor must be > 0"),
        ("amt-king2019", "dboffset", float("inf"), ValueError, "dboffset must be a finite"),
        ("amt-king2019", "compression_n", -0.3, ValueError, "compression_n must be > 0"),
        ("amt-king2019", "mfhigh", 1.0, ValueError, "mflow must be below mfhigh"),
        ("amt-king2019", "lp_150hz", 0, TypeError, "lp_150hz must be True or False"),
        ("amt-king2019", "modbank_qfactor", 1e300, ValueError, "modbank_qfactor must be > 0"),
        ("amt-king2019", "compression_n", 1e300, ValueError, "compression_n must be > 0 and <="),
        ("amt-paulick2024", "n_channels", 2.5, TypeError, "n_channels must be an integer"),
        ("amt-paulick2024", "resample_factor", 0, ValueError, "resample_factor must be >= 1"),
        ("amt-paulick2024", "drnl_preset", "x", ValueError, "drnl_preset must be one of"),
        ("amt-glasberg2002", "include_stl", "no", TypeError, "include_stl must be True"),
        ("amt-glasberg2002", "frame_shift", 0.0005, ValueError, "at least 0.001 s"),
        ("amt-moore2016", "diotic", "no", TypeError, "diotic must be True or False"),
        ("amt-moore2016", "preset", "x", ValueError, "preset must be one of"),
    ],
)
def test_model_config_fields(name, field, value, err, match):
    with pytest.raises(err, match=match):
        FEATURE_EXTRACTORS[name].config_type(**{field: value})


def test_config_normalises_accepted_spellings():
    c = AuditoryConfig(
        sampling_rate=16000.0, frame_shift=np.float32(0.0125), full_scale_db_spl=np.int64(94)
    )
    assert type(c.sampling_rate) is int and c.sampling_rate == 16000
    assert type(c.frame_shift) is float and type(c.full_scale_db_spl) is float
    assert AuditoryConfig.from_dict(c.to_dict()) == c


@pytest.mark.skipif(HAS_CUDA, reason="needs a machine without CUDA")
@pytest.mark.parametrize("name", NAMES)
def test_cuda_device_without_cuda_fails_at_construction(name):
    with pytest.raises(ValueError, match='CUDA is not available.*use device="cpu"'):
        FEATURE_EXTRACTORS[name].config_type(device="cuda")
    with pytest.raises(ValueError, match="CUDA is not available"):
        FeatureExtractor.from_dict({"feature_type": name, "device": "cuda:0"})


# ------------------------------------------------------------------------- extractor inputs
def test_fractional_sampling_rate_is_an_error_integral_float_is_not():
    ex = extractor("amt-dau1997", flow=500.0, fhigh=4000.0)
    x = noise(ex)
    with pytest.raises(ValueError, match=r"sampling_rate must be a whole number.*16000\.5"):
        ex.extract(x, 16000.5)
    with pytest.raises(TypeError, match="sampling_rate"):
        ex.extract(x, "16000")
    np.testing.assert_array_equal(ex.extract(x, 16000.0), ex.extract(x, 16000))


@pytest.mark.parametrize("sr, frame_shift, minimum", [(16000, 0.01, 80), (44100, 0.01, 221)])
def test_short_input_message_states_the_true_minimum(sr, frame_shift, minimum):
    ex = extractor("amt-dau1997", sampling_rate=sr, frame_shift=frame_shift, flow=500.0)
    ex.config.fhigh = 4000.0
    x = noise(ex, 0.05)
    assert ex.extract(x[..., :minimum], sr).shape[0] == 1
    with pytest.raises(ValueError, match=f"shorter than one frame \\({minimum} samples or more"):
        ex.extract(x[..., : minimum - 1], sr)


@pytest.mark.parametrize("name", NAMES)
def test_target_level_on_silence_is_an_error(name):
    ex = extractor(name, target_level_db_spl=60.0)
    sr = ex.config.sampling_rate
    x = np.zeros((ex.input_channels, sr // 10), np.float32)
    with pytest.raises(ValueError, match="digital silence.*target_level_db_spl=60.0"):
        ex.extract(x, sr)
    with pytest.raises(ValueError, match="too quiet to scale to target_level_db_spl=60.0"):
        ex.extract(x + 1e-9, sr)


@pytest.mark.parametrize("name", NAMES)
def test_overflowing_level_scaling_is_an_error(name):
    ex = extractor(name, full_scale_db_spl=200.0)
    sr = ex.config.sampling_rate
    # samples far outside [-1, 1]: peaks at 260 dB SPL at this full scale
    x = np.random.default_rng(0).uniform(-1e3, 1e3, (ex.input_channels, sr // 10))
    x = x.astype(np.float32)
    with pytest.raises(ValueError, match="after level scaling.*full_scale_db_spl=200.0"):
        ex.extract(x, sr)
    huge = np.full((ex.input_channels, sr // 10), 1e300)  # float64: inf in float32
    with pytest.raises(ValueError, match="overflows"):
        extractor(name).extract(huge, sr)


@pytest.mark.parametrize("name", ["amt-dau1997", "amt-glasberg2002"])
def test_extreme_but_valid_levels_give_finite_features(name):
    for fs_db in (-50.0, 200.0):
        ex = extractor(name, full_scale_db_spl=fs_db)
        x = noise(ex, 0.1, level_db=fs_db - 20.0)
        f = ex.extract(x, ex.config.sampling_rate)
        assert np.isfinite(f).all()


@pytest.mark.parametrize(
    "lengths, match",
    [
        ([800, 1601], "lengths\\[1\\] = 1601 exceeds the item's 1600 samples"),
        ([800, -5], "lengths\\[1\\] = -5: every length must be at least 1"),
        ([0, 800], "lengths\\[0\\] = 0"),
        ([800], "got 2 signals but 1 lengths"),
        (np.array([800.0, 900.0]), "integer sample counts, got dtype float64"),
        ([800, 900.0], "integer sample counts, got 900.0"),
        (np.array([[800, 900]]), "1-D"),
        ("800", "sequence, numpy array or tensor"),
    ],
)
def test_extract_batch_lengths(lengths, match):
    ex = extractor("amt-dau1997", flow=500.0, fhigh=4000.0)
    x = np.stack([noise(ex, 0.1, seed=0)[0], noise(ex, 0.1, seed=1)[0]])
    with pytest.raises(ValueError, match=match):
        ex.extract_batch(x, 16000, lengths=lengths)
    with pytest.raises(ValueError):
        ex.extract_batch(list(torch.from_numpy(x)), 16000, lengths=lengths)


@pytest.mark.parametrize("name", ["amt-dau1997", "amt-glasberg2002"])
def test_negative_channel_counts_from_the_end(name):
    ex = extractor(name)
    x = np.concatenate([noise(ex, 0.1, seed=0), noise(ex, 0.1, seed=1)])
    sr = ex.config.sampling_rate
    last = extractor(name, channel=-1).extract(x, sr)
    np.testing.assert_array_equal(last, extractor(name, channel=1).extract(x, sr))
    np.testing.assert_array_equal(last, ex.extract(x[1:], sr))
    with pytest.raises(ValueError, match="channel=-3 is out of range for 2-channel audio"):
        extractor(name, channel=-3).extract(x, sr)


def test_extract_batch_valid_lengths_match_extract():
    ex = extractor("amt-dau1997", flow=500.0, fhigh=4000.0)
    x = np.stack([noise(ex, 0.1, seed=0)[0], noise(ex, 0.1, seed=1)[0]])
    out = ex.extract_batch(x, 16000, lengths=torch.tensor([800, 1600]))
    np.testing.assert_allclose(out[0], ex.extract(x[0, :800], 16000), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out[1], ex.extract(x[1], 16000), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------- models
def _streaming_models():
    from lhotse_amt.models.dau1997 import Dau1997
    from lhotse_amt.models.king2019 import King2019
    from lhotse_amt.models.osses2021 import Osses2021
    from lhotse_amt.models.paulick2024 import Paulick2024

    return [
        Dau1997(16000, flow=500.0, fhigh=2000.0),
        Osses2021(16000, flow=500.0, fhigh=2000.0),
        King2019(16000, flow=500.0, fhigh=2000.0),
        Paulick2024(44100, n_channels=2, flow=500.0, fhigh=2000.0),
    ]


@pytest.mark.parametrize("model", _streaming_models(), ids=lambda m: type(m).__name__)
def test_stream_checks_its_input_like_forward(model):
    x = torch.randn(1, 400) * 0.01
    out, _ = model.stream(x)
    assert all(torch.isfinite(v).all() for v in out.values())
    bad = x.clone()
    bad[0, 10] = float("nan")
    with pytest.raises(ValueError, match="stream input contains NaN or infinite"):
        model.stream(bad)
    with pytest.raises(ValueError, match="NaN or infinite"):
        model(bad)
    pcm = (x * 32767).to(torch.int16)
    with pytest.raises(ValueError, match="floating point"):
        model.stream(pcm)
    with pytest.raises(ValueError, match="floating point"):
        model(pcm)
    with pytest.raises(TypeError, match="stream input must be a torch.Tensor"):
        model.stream(x.numpy())
    with pytest.raises(ValueError, match="must have 2 dimensions"):
        model.stream(x[0])
    with pytest.raises(TypeError, match="state must be None or the dict"):
        model.stream(x, state=[1])


def test_stream_converts_to_model_dtype():
    from lhotse_amt.models.dau1997 import Dau1997

    m = Dau1997(16000, flow=500.0, fhigh=2000.0)
    x = torch.randn(1, 300, dtype=torch.float64) * 0.01
    a, _ = m.stream(x, upto="adaptation")
    b, _ = m.stream(x.float(), upto="adaptation")
    assert a["adaptation"].dtype == torch.float32
    torch.testing.assert_close(a["adaptation"], b["adaptation"])


def _model(name):
    from lhotse_amt import models  # noqa: F401
    from lhotse_amt.models.dau1997 import Dau1997
    from lhotse_amt.models.glasberg2002 import Glasberg2002
    from lhotse_amt.models.king2019 import King2019
    from lhotse_amt.models.moore2016 import Moore2016
    from lhotse_amt.models.osses2021 import Osses2021
    from lhotse_amt.models.paulick2024 import Paulick2024

    return dict(
        Dau1997=Dau1997,
        Osses2021=Osses2021,
        King2019=King2019,
        Paulick2024=Paulick2024,
        Glasberg2002=Glasberg2002,
        Moore2016=Moore2016,
    )[name]


ALL_MODELS = ["Dau1997", "Osses2021", "King2019", "Paulick2024", "Glasberg2002", "Moore2016"]


@pytest.mark.parametrize(
    "fs, err, match",
    [
        (0, ValueError, "fs must be a finite sampling rate > 0"),
        (-16000, ValueError, "fs must be a finite sampling rate > 0"),
        (float("nan"), ValueError, "fs must be a finite sampling rate"),
        (float("inf"), ValueError, "fs must be a finite sampling rate"),
        (1e12, ValueError, "<= 1e\\+06 Hz"),
        ("16000", TypeError, "fs must be a sampling rate"),
        (True, TypeError, "fs must be a sampling rate"),
    ],
)
@pytest.mark.parametrize("name", ALL_MODELS)
def test_model_constructors_check_fs(name, fs, err, match):
    with pytest.raises(err, match=match):
        _model(name)(fs)


@pytest.mark.parametrize("name", ["Glasberg2002", "Moore2016"])
def test_loudness_models_need_a_whole_number_rate(name):
    with pytest.raises(ValueError, match="fs must be a whole number of Hz, got 32000.5"):
        _model(name)(32000.5)
    assert _model(name)(32000.0).fs == 32000.0


@pytest.mark.parametrize(
    "name, kwargs, err, match",
    [
        ("Dau1997", dict(flow=float("nan")), ValueError, "flow must be a finite"),
        ("Dau1997", dict(dtype="float32"), TypeError, "dtype must be a torch.dtype"),
        ("Dau1997", dict(ihc_kwargs="dau1996"), TypeError, "ihc_kwargs must be a dict"),
        ("Dau1997", dict(learnable="yes"), TypeError, "learnable must be True or False"),
        ("Osses2021", dict(compensation="half"), ValueError, "compensation must be one of"),
        ("King2019", dict(compression_n=float("nan")), ValueError, "compression_n must be"),
        ("King2019", dict(adt_hp_order=1.5), TypeError, "adt_hp_order must be an integer"),
        ("King2019", dict(dboffset=1e9), ValueError, "dboffset must be >= -50"),
        ("King2019", dict(mflow=200.0), ValueError, "mflow must be below mfhigh"),
        ("Paulick2024", dict(n_channels=1.5), TypeError, "n_channels must be an integer"),
        ("Paulick2024", dict(n_channels=0), ValueError, "n_channels must be >= 1"),
        ("Paulick2024", dict(resample_factor=0), ValueError, "resample_factor must be >= 1"),
        ("Paulick2024", dict(filter_type="fir"), ValueError, "filter_type must be one of"),
        ("Glasberg2002", dict(chunk_frames=0), ValueError, "chunk_frames must be >= 1"),
        ("Glasberg2002", dict(backend="gpu"), ValueError, "backend must be one of"),
        (
            "Glasberg2002",
            dict(loudness_integration_kwargs={"stl_attack": 2.0}),
            ValueError,
            "stl_attack.*<= 1",
        ),
        (
            "Glasberg2002",
            dict(loudness_integration_kwargs={"tau_attack": -0.1}),
            ValueError,
            "tau_attack.*> 0",
        ),
        ("Glasberg2002", dict(erb_kwargs={"erb_step": 0.0}), ValueError, "erb_step must be > 0"),
        ("Moore2016", dict(binaural_loudness_kwargs={"p": math.nan}), ValueError, "'p'"),
        ("Moore2016", dict(specific_loudness_kwargs={"c": -1.0}), ValueError, "'c'.*> 0"),
        ("Moore2016", dict(ltl_agc_kwargs={"attack_alpha": 0.0}), ValueError, "attack_alpha"),
        ("Moore2016", dict(spectrum_kwargs={"prune": "no"}), TypeError, "prune"),
        (
            "Moore2016",
            dict(excitation_kwargs={"erb_lower": 30.0, "erb_upper": 2.0}),
            ValueError,
            "erb_lower must be below erb_upper",
        ),
    ],
)
def test_model_constructor_arguments(name, kwargs, err, match):
    fs = {"Paulick2024": 44100, "Glasberg2002": 32000, "Moore2016": 32000}.get(name, 16000)
    with pytest.raises(err, match=match):
        _model(name)(fs, **kwargs)


# ------------------------------------------------------------------------ functional blocks
def _functional_cases():
    from lhotse_amt.functional import compression as C
    from lhotse_amt.functional import drnl as D
    from lhotse_amt.functional import ear as E
    from lhotse_amt.functional import erb as ERB
    from lhotse_amt.functional import ihc_paulick as IP
    from lhotse_amt.functional import king2019_modulation as K
    from lhotse_amt.functional import loudness as L
    from lhotse_amt.functional import resample as R

    x = torch.randn(2, 64) * 0.01
    nan = x.clone()
    nan[0, 3] = float("nan")
    i16 = torch.zeros(2, 64, dtype=torch.int16)
    h = torch.ones(5) / 5
    return [
        ("broken_stick nan", lambda: C.broken_stick_compression(nan), ValueError, "NaN"),
        ("broken_stick int", lambda: C.broken_stick_compression(i16), ValueError, "floating"),
        ("power exponent", lambda: C.power_compression(x, -0.3), ValueError, "exponent"),
        ("power numpy", lambda: C.power_compression(x.numpy()), TypeError, "torch.Tensor"),
        ("knee_db nan", lambda: C.knee_amplitude(float("nan")), ValueError, "knee_db"),
        ("drnl params fc", lambda: D.drnl_parameters(np.array([-1.0])), ValueError, "fc"),
        ("drnl preset", lambda: D.drnl_parameters(np.array([1e3]), "x"), ValueError, "preset"),
        ("design_drnl fs", lambda: D.design_drnl(0, np.array([1e3])), ValueError, "fs must"),
        (
            "butter cutoff",
            lambda: D.butter_lowpass_sos(np.array([9000.0]), 16000, 2),
            ValueError,
            "below fs/2",
        ),
        (
            "gammatone order",
            lambda: D.classic_gammatone_sos(np.array([1e3]), np.array([100.0]), 16000, 0),
            ValueError,
            "order must be >= 1",
        ),
        ("fir nan", lambda: E.fir_filter(nan, h), ValueError, "NaN"),
        ("fir taps 2-D", lambda: E.fir_filter(x, h[None]), ValueError, "FIR taps h"),
        ("fir comp", lambda: E.fir_filter_compensated(x, h, "half"), ValueError, "compensation"),
        ("headphone fs", lambda: E.headphone_fir(-1.0), ValueError, "fs must"),
        ("headphone phase", lambda: E.headphone_fir(16000, phase="zero"), ValueError, "phase"),
        ("ihc int", lambda: IP.ihc_paulick(i16, 44100), ValueError, "floating"),
        ("ihc fs", lambda: IP.ihc_paulick(x, 0), ValueError, "fs must"),
        ("ihc backend", lambda: IP.ihc_paulick(x, 44100, backend="gpu"), ValueError, "backend"),
        ("king freqs", lambda: K.king2019_modulation_frequencies(2.0, math.inf), ValueError, "mf"),
        ("king sos fs", lambda: K.king2019_modulation_sos(0, np.array([4.0])), ValueError, "fs"),
        ("hilbert numpy", lambda: K.hilbert_transform(x.numpy()), TypeError, "torch.Tensor"),
        ("tf nan", lambda: K.tf_filter(nan, h, torch.tensor([1.0])), ValueError, "NaN"),
        (
            "pi mfc count",
            lambda: K.phase_insensitivity(torch.zeros(1, 3, 64), np.array([2.0, 20.0])),
            ValueError,
            "mfc has 2 entries",
        ),
        ("bank nan", lambda: K.king2019_modulation_filterbank(nan), ValueError, "NaN"),
        ("pa level", lambda: L.pa_from_full_scale(x, float("nan")), ValueError, "full_scale"),
        ("agc attack", lambda: L.agc(x, 0.0, 0.5), ValueError, "attack must be > 0"),
        ("agc nan", lambda: L.agc(nan, 0.1, 0.5), ValueError, "NaN"),
        ("agc dim", lambda: L.agc(x, 0.1, 0.5, dim=3, backend="reference"), ValueError, "dim must"),
        ("to32k fs", lambda: L.resample_to_32k(x, 16000.5), ValueError, "whole number"),
        ("fir full nan", lambda: L.fir_filter_full(nan, h), ValueError, "NaN"),
        ("rational fs", lambda: R.rational_factors(0, 16000), ValueError, "fs_in must"),
        ("resample up", lambda: R.resample_poly(x, 0, 1), ValueError, "up must be >= 1"),
        ("resample huge", lambda: R.resample_poly(x, 10**6, 1), ValueError, "up must be"),
        ("resample int", lambda: R.resample_poly(i16, 2, 1), ValueError, "floating"),
        ("erb bwmul", lambda: ERB.erbspacebw(80, 8000, 1e-300), ValueError, "more than 10000"),
        ("erb inf", lambda: ERB.erbspacebw(80, math.inf), ValueError, "fhigh must be a finite"),
        ("middle ear fs", lambda: E.middle_ear_fir(100.5), ValueError, "too low"),
        ("agc empty", lambda: L.agc(x[:, :0], 0.1, 0.1), ValueError, "too short"),
        ("ihc empty", lambda: IP.ihc_paulick(x[:, :0], 44100), ValueError, "too short"),
        ("comp 0-d", lambda: E.fir_filter_compensated(x[0, 0], h), ValueError, "dimensions"),
    ]


@pytest.mark.parametrize("case", _functional_cases(), ids=lambda c: c[0])
def test_functional_blocks_check_their_inputs(case):
    _, fn, err, match = case
    with pytest.raises(err, match=match):
        fn()


def test_functional_blocks_accept_valid_input_unchanged():
    from lhotse_amt.functional import compression as C
    from lhotse_amt.functional import loudness as L

    x = torch.randn(2, 64, dtype=torch.float64)
    torch.testing.assert_close(C.power_compression(x, 1), x)
    y = L.agc(x.abs(), 1.0, 1.0, backend="torch")  # alpha 1: the smoother is the identity
    torch.testing.assert_close(y, x.abs())
