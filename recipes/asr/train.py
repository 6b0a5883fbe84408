#!/usr/bin/env python
"""Character CTC recognition with auditory-model features vs filterbank features.

For every ``--features`` spec (``kaldi-fbank``, ``amt-dau1997``,
``amt-dau1997:stage=adaptation``, ``amt-glasberg2002``, ...) the same small recognizer
(global mean/variance normalisation computed on train, 2 convolutions, BiLSTM, CTC over
characters) is trained with Lhotse's ``K2SpeechRecognitionDataset`` and a
``DynamicBucketingSampler``, on precomputed features (``PrecomputedFeatures``) or on
features computed on the fly (``OnTheFlyFeatures(extractor)``). It is evaluated with
greedy CTC decoding on the clean test set and on the test set mixed with synthetic noise
at ``--snrs`` through Lhotse ``MixedCut`` s (precomputed: the extractors' feature-domain
mixing hooks, lazily; on the fly: the features of the mixed audio, exact). CER per feature
type and condition goes to ``results.md``/``results.json``/``cer.png`` in ``--exp-dir``.

``--learnable-frontend`` adds the differentiable configuration: the whole
``lhotse_amt.Dau1997(learnable=True)`` (gammatone filterbank, IHC, adaptation loops,
modulation filterbank; default 31 channels 80-8000 Hz at 16 kHz) inside the network on raw
audio, pooled to 10-ms frames like ``amt-dau1997`` and followed by a learned per-feature
normalisation and the same recognizer, trained with the same steps, optimizer and
schedule as the fixed-feature runs (checks that the front end's parameters receive
finite, non-zero gradients).

Data: ``--manifest-dir`` with ``lhotse prepare`` manifests (e.g. LibriSpeech with
``--train-split train-clean-100 --dev-split dev-clean --test-split test-clean``), or,
without it, a synthetic espeak-ng corpus built in ``--data-dir``. ``--smoke`` is a tiny
configuration for CI (a few minutes on a CPU; asserts that the training loss falls).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from common.asr import CharTokenizer, CTCRecognizer, cer, greedy_decode  # noqa: E402
from common.manifests import (  # noqa: E402
    cuts_from_manifests,
    find_splits,
    make_extractor,
    spec_tag,
)
from common.synth import make_noise, make_speech_corpus  # noqa: E402
from lhotse import CutSet  # noqa: E402
from lhotse.dataset import (  # noqa: E402
    AudioSamples,
    DynamicBucketingSampler,
    K2SpeechRecognitionDataset,
    OnTheFlyFeatures,
    PrecomputedFeatures,
    SimpleCutSampler,
)
from torch.utils.data import DataLoader  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402

import lhotse_amt  # noqa: E402
from lhotse_amt.functional.framing import frame_mean  # noqa: E402
from lhotse_amt.pipeline import extract_cuts  # noqa: E402

log = logging.getLogger("asr")


def get_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    d = p.add_argument_group("data")
    d.add_argument("--manifest-dir", type=Path, default=None, help="`lhotse prepare` output")
    d.add_argument("--train-split", default="train")
    d.add_argument("--dev-split", default="dev")
    d.add_argument("--test-split", default="test")
    d.add_argument(
        "--data-dir",
        type=Path,
        default=Path("data/asr_synth"),
        help="where the synthetic corpus is written (no --manifest-dir)",
    )
    d.add_argument("--num-train", type=int, default=1200, help="synthetic train utterances")
    d.add_argument("--num-dev", type=int, default=100)
    d.add_argument("--num-test", type=int, default=200)
    d.add_argument("--max-words", type=int, default=4, help="synthetic sentence length")
    d.add_argument("--min-words", type=int, default=2)
    d.add_argument("--max-cut-duration", type=float, default=20.0, help="drop longer cuts")
    d.add_argument(
        "--snrs",
        type=float,
        nargs="*",
        default=[10.0, 0.0],
        help="test SNRs (dB) of the noise conditions (clean is always tested)",
    )
    d.add_argument(
        "--train-snrs",
        type=float,
        nargs="*",
        default=[],
        help="multi-condition training: mix half the train cuts at these SNRs",
    )
    f = p.add_argument_group("features")
    f.add_argument(
        "--features",
        nargs="*",
        default=["kaldi-fbank", "amt-dau1997", "amt-dau1997:stage=adaptation"],
        help="extractor specs (NAME[:key=value,...] or a YAML path)",
    )
    f.add_argument("--input-strategy", choices=["precomputed", "on-the-fly"], default="precomputed")
    f.add_argument(
        "--exact-mix-eval",
        action="store_true",
        help="with precomputed features, also test on features of the mixed audio",
    )
    f.add_argument("-j", "--num-jobs", type=int, default=2, help="feature extraction processes")
    t = p.add_argument_group("training")
    t.add_argument("--epochs", type=int, default=12)
    t.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: no)")
    t.add_argument(
        "--max-minutes",
        type=float,
        default=0.0,
        help="training time limit per feature type (0: none)",
    )
    t.add_argument("--max-duration", type=float, default=45.0, help="seconds of audio per batch")
    t.add_argument("--lr", type=float, default=2e-3)
    t.add_argument("--hidden", type=int, default=96)
    t.add_argument("--conv-channels", type=int, default=128)
    t.add_argument("--layers", type=int, default=1, help="BiLSTM layers")
    t.add_argument("--subsample", type=int, default=3, help="time stride of the first conv")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    t.add_argument("--device", default="cpu")
    lf = p.add_argument_group("differentiable front end")
    lf.add_argument(
        "--learnable-frontend",
        action="store_true",
        help="also train Dau1997(learnable=True) inside the network on raw audio",
    )
    lf.add_argument("--learnable-fs", type=int, default=16000, help="front-end rate (Hz)")
    lf.add_argument("--learnable-flow", type=float, default=80.0, help="lowest channel (Hz)")
    lf.add_argument("--learnable-fhigh", type=float, default=8000.0, help="highest channel (Hz)")
    lf.add_argument(
        "--learnable-lr-scale",
        type=float,
        default=0.1,
        help="front-end learning rate / --lr (relative, log-domain parameter steps)",
    )
    p.add_argument("--exp-dir", type=Path, default=Path("exp/asr"))
    p.add_argument(
        "--smoke",
        action="store_true",
        help="tiny corpus and model, few steps; asserts the loss falls",
    )
    p.add_argument("--quiet", action="store_true")
    a = p.parse_args(argv)
    if not (a.learnable_lr_scale > 0 and math.isfinite(a.learnable_lr_scale)):
        p.error(f"--learnable-lr-scale must be finite and > 0, got {a.learnable_lr_scale}")
    if a.smoke:
        a.num_train, a.num_dev, a.num_test = (
            min(a.num_train, 48),
            min(a.num_dev, 6),
            min(a.num_test, 10),
        )
        a.max_words = min(a.max_words, 3)
        a.hidden, a.conv_channels, a.layers = 64, 64, 1
        a.max_duration = min(a.max_duration, 15.0)
        a.epochs = max(a.epochs, 1) if a.max_steps else a.epochs
        a.max_steps = a.max_steps or 24
        a.lr = 3e-3
        a.num_jobs = 1
    return a


# ------------------------------------------------------------------------------- data
def load_data(a: argparse.Namespace) -> tuple[dict[str, CutSet], CutSet]:
    """Train/dev/test cuts (one per supervision) and the noise cuts."""
    tok = CharTokenizer()
    if a.manifest_dir is None:
        make_speech_corpus(
            a.data_dir,
            {"train": a.num_train, "dev": a.num_dev, "test": a.num_test},
            max_words=a.max_words,
            min_words=min(a.min_words, a.max_words),
            seed=a.seed,
            progress_bar=not a.quiet,
        )
        mdir = a.data_dir
    else:
        mdir = a.manifest_dir
    found = find_splits(mdir)
    splits = {}
    for name, split in (("train", a.train_split), ("dev", a.dev_split), ("test", a.test_split)):
        if split not in found:
            raise SystemExit(f"split {split!r} not in {mdir} (found {sorted(found)})")
        rec, sup = found[split]
        cuts = cuts_from_manifests(rec, sup, trim=True)
        cuts = cuts.filter(lambda c: 0.2 <= c.duration <= a.max_cut_duration)
        cuts = cuts.filter(lambda c: len(tok.normalize(c.supervisions[0].text or "")) > 0)
        splits[name] = cuts.to_eager()
        log.info(
            "%s (%s): %d cuts, %.1f min",
            name,
            split,
            len(splits[name]),
            sum(c.duration for c in splits[name]) / 60,
        )
    sr = splits["train"][0].sampling_rate
    noise_dir = a.data_dir if a.manifest_dir is None else a.exp_dir / "noise"
    rec = make_noise(noise_dir, num=4, duration=30.0 if not a.smoke else 6.0, sampling_rate=sr)
    noise = cuts_from_manifests(rec).to_eager()
    return splits, noise


def mix_with_noise(
    cuts: CutSet, noise: CutSet, snrs: list[float], seed: int, fraction: float = 1.0
) -> CutSet:
    """Each cut mixed with a random segment of a random noise cut at a random SNR from
    ``snrs`` (``fraction`` of the cuts; the others stay clean). Deterministic in ``seed``."""
    rng = np.random.default_rng(seed)
    noise = list(noise)
    out = []
    for c in cuts:
        if rng.random() >= fraction:
            out.append(c)
            continue
        n = noise[int(rng.integers(len(noise)))]
        off = float(rng.uniform(0, max(0.0, n.duration - c.duration - 0.01)))
        seg = n.truncate(offset=off, duration=min(c.duration, n.duration - off))
        snr = float(snrs[int(rng.integers(len(snrs)))])
        out.append(c.mix(seg, snr=snr, preserve_id="left", allow_padding=True))
    return CutSet.from_cuts(out)


def with_features(spec: str, splits: dict[str, CutSet], noise: CutSet, a) -> tuple:
    """The extractor, cuts (resampled to its rate) and, for precomputed input, stored
    features (resumable; reused when present)."""
    ex = make_extractor(spec)
    sr = getattr(ex.config, "sampling_rate", None)
    tag = spec_tag(spec)
    out = {}
    for name, cuts in list(splits.items()) + [("noise", noise)]:
        if sr is not None and cuts[0].sampling_rate != sr:
            cuts = cuts.resample(sr)
        if a.input_strategy == "precomputed":
            fdir = a.exp_dir / "feats" / tag
            manifest = fdir / f"cuts_{name}.jsonl.gz"
            if manifest.exists():
                cuts = CutSet.from_file(manifest).to_eager()
            else:
                log.info("%s: computing %s features", tag, name)
                cuts = extract_cuts(
                    cuts, ex, fdir / name, manifest, num_jobs=a.num_jobs, progress_bar=not a.quiet
                ).to_eager()
        out[name] = cuts
    return ex, out


def loader(cuts: CutSet, strategy, max_duration: float, train: bool, seed: int) -> DataLoader:
    ds = K2SpeechRecognitionDataset(input_strategy=strategy, return_cuts=True)
    if train:
        nb = max(1, min(10, len(cuts) // 8))
        sampler = DynamicBucketingSampler(
            cuts,
            max_duration=max_duration,
            shuffle=True,
            num_buckets=nb,
            seed=seed,
            drop_last=False,
        )
    else:
        sampler = SimpleCutSampler(cuts, max_duration=max_duration, shuffle=False)
    return DataLoader(
        ds,
        sampler=sampler,
        batch_size=None,
        num_workers=0,
        worker_init_fn=lhotse_amt.worker_init_fn,
    )


def batch_tensors(batch: dict, tok: CharTokenizer, audio: bool = False):
    """Inputs, input lengths (frames or samples), targets and target lengths, in the order
    of the inputs."""
    sup = batch["supervisions"]
    x = batch["inputs"]
    order = sup["sequence_idx"].tolist()
    key = "num_samples" if audio else "num_frames"
    lens = torch.zeros(x.shape[0], dtype=torch.long)
    texts = [""] * x.shape[0]
    for k, i in enumerate(order):
        lens[i] = int(sup[key][k]) if key in sup else x.shape[1]
        texts[i] = tok.normalize(sup["text"][k])
    ys = [torch.tensor(tok.encode(t), dtype=torch.long) for t in texts]
    return x, lens, texts, torch.cat(ys), torch.tensor([len(y) for y in ys])


def norm_stats(cuts: CutSet, ex, precomputed: bool, limit: int = 300) -> tuple:
    """Per-feature mean and standard deviation over (up to ``limit``) train cuts."""
    s = s2 = None
    n = 0
    for c in tqdm(
        list(cuts.subset(first=min(limit, len(cuts)))), desc="normalisation stats", leave=False
    ):
        f = c.load_features() if precomputed else ex.extract(c.load_audio(), c.sampling_rate)
        f = np.asarray(f, np.float64)
        s = f.sum(0) if s is None else s + f.sum(0)
        s2 = (f**2).sum(0) if s2 is None else s2 + (f**2).sum(0)
        n += f.shape[0]
    mean = s / n
    std = np.sqrt(np.maximum(s2 / n - mean**2, 1e-8))
    std = np.maximum(std, 1e-3 * std.max())
    return torch.tensor(mean, dtype=torch.float32), torch.tensor(std, dtype=torch.float32)


# ------------------------------------------------------------------------------- training
def fixed_setup(spec: str, splits, noise, a, tok) -> dict:
    """Model, cuts and input strategy of a fixed-feature run."""
    t0 = time.perf_counter()
    ex, cs = with_features(spec, splits, noise, a)
    t_feats = time.perf_counter() - t0
    pre = a.input_strategy == "precomputed"
    mean, std = norm_stats(cs["train"], ex, pre)
    torch.manual_seed(a.seed)
    model = CTCRecognizer(
        int(mean.numel()),
        tok.vocab_size,
        a.hidden,
        a.conv_channels,
        a.layers,
        mean,
        std,
        subsample=a.subsample,
    )
    return dict(
        model=model,
        groups=[list(model.parameters())],
        lrs=[a.lr],
        cuts=cs,
        strategy=PrecomputedFeatures() if pre else OnTheFlyFeatures(ex),
        input_strategy=a.input_strategy,
        extractor=ex,
        dim=int(mean.numel()),
        audio=False,
        feature_seconds=t_feats,
    )


def learnable_setup(splits, noise, a, tok) -> dict:
    """Dau1997(learnable=True) front end + learned normalisation + the same recognizer on
    raw audio at ``--learnable-fs``; two parameter groups (network: ``--lr``, AdamW weight
    decay as the fixed runs; front end: ``--lr * --learnable-lr-scale``, no decay)."""
    t0 = time.perf_counter()
    cs = {
        k: (v.resample(a.learnable_fs) if v[0].sampling_rate != a.learnable_fs else v)
        for k, v in list(splits.items()) + [("noise", noise)]
    }
    fe = AuditoryFrontEnd(a.learnable_fs, a.learnable_flow, a.learnable_fhigh)
    mean, std = frontend_stats(fe, cs["train"], a)
    t_stats = time.perf_counter() - t0
    torch.manual_seed(a.seed)
    rec = CTCRecognizer(
        fe.num_features,
        tok.vocab_size,
        a.hidden,
        a.conv_channels,
        a.layers,
        subsample=a.subsample,
    )
    model = LearnableRecognizer(fe, FeatureNorm(mean, std), rec)
    return dict(
        model=model,
        groups=[list(model.norm.parameters()) + list(rec.parameters()), list(fe.parameters())],
        lrs=[a.lr, a.lr * a.learnable_lr_scale],
        cuts=cs,
        strategy=AudioSamples(),
        input_strategy="raw audio",
        extractor=None,
        dim=fe.num_features,
        audio=True,
        feature_seconds=t_stats,
    )


def train_one(spec: str, splits, noise, a, tok) -> dict:
    tag = spec_tag(spec) if spec != LEARNABLE else LEARNABLE
    t_start = time.perf_counter()
    su = (
        learnable_setup(splits, noise, a, tok)
        if spec == LEARNABLE
        else fixed_setup(spec, splits, noise, a, tok)
    )
    cs, strategy, audio, model = su["cuts"], su["strategy"], su["audio"], su["model"]
    fe = model.frontend if audio else None
    t_feats = time.perf_counter() - t_start
    train_cuts = cs["train"]
    if a.train_snrs:
        train_cuts = mix_with_noise(train_cuts, cs["noise"], a.train_snrs, a.seed + 7, 0.5)
    model.to(a.device)
    opt = torch.optim.AdamW(
        [
            dict(params=g, lr=lr, weight_decay=1e-2 if k == 0 else 0.0)
            for k, (g, lr) in enumerate(zip(su["groups"], su["lrs"]))
        ]
    )
    total_dur = sum(c.duration for c in train_cuts)
    steps_per_epoch = max(1, math.ceil(total_dur / a.max_duration))
    total = steps_per_epoch * a.epochs
    if a.max_steps:
        total = min(total, a.max_steps)
    sched = torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=su["lrs"], total_steps=total + 1, pct_start=0.15
    )
    ctc = torch.nn.CTCLoss(blank=0, zero_infinity=True)
    losses, dev_hist, step_s, fe_s, grads, skipped = [], [], [], [], [], 0
    best = (float("inf"), None)
    step = 0
    stop = False
    bar = tqdm(total=total, desc=f"train {tag}", disable=a.quiet)
    for epoch in range(a.epochs):
        model.train()
        dl = loader(train_cuts, strategy, a.max_duration, True, a.seed + epoch)
        dl.sampler.set_epoch(epoch)
        for batch in dl:
            t0 = time.perf_counter()
            x, lens, _, ys, ylens = batch_tensors(batch, tok, audio=audio)
            x, lens = x.to(a.device), lens.to(a.device)
            opt.zero_grad()
            if fe is None:
                lp, olens = model(x, lens)
                loss = ctc(lp.transpose(0, 1), ys, olens, ylens)
                loss.backward()
            else:
                # the front end's forward and backward timed on their own: the network's
                # backward stops at the (detached) features, then the front end's runs
                tf = time.perf_counter()
                feats, flens = fe(x, lens)
                tf = time.perf_counter() - tf
                fd = feats.detach().requires_grad_(True)
                lp, olens = model.rec(model.norm(fd), flens)
                loss = ctc(lp.transpose(0, 1), ys, olens, ylens)
                loss.backward()
                tb = time.perf_counter()
                feats.backward(fd.grad)
                fe_s.append(tf + time.perf_counter() - tb)
                g = frontend_grads(fe)
                grads.append(g)
                if not all(math.isfinite(v) for v in g.values()):
                    skipped += 1  # a non-finite front-end gradient: this step is not taken
                    log.warning("step %d: non-finite front-end gradient %s", step, g)
                    opt.zero_grad()
            for grp in su["groups"]:
                torch.nn.utils.clip_grad_norm_(grp, 5.0)
            opt.step()
            sched.step()
            step_s.append(time.perf_counter() - t0)
            losses.append(float(loss.detach()))
            step += 1
            bar.update(1)
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
            minutes = (time.perf_counter() - t_start - t_feats) / 60
            if step >= total or (a.max_minutes and minutes > a.max_minutes):
                stop = True
                break
        dcer = evaluate(model, cs["dev"], strategy, a, tok, audio)["cer"]
        dev_hist.append(dcer)
        log.info(
            "%s epoch %d step %d loss %.3f dev CER %.3f (%.2f s/step)",
            tag,
            epoch,
            step,
            np.mean(losses[-steps_per_epoch:]),
            dcer,
            np.mean(step_s[-steps_per_epoch:]),
        )
        if dcer < best[0]:
            best = (dcer, {k: v.clone() for k, v in model.state_dict().items()})
        if stop:
            break
    bar.close()
    model.load_state_dict(best[1])
    t_train = time.perf_counter() - t_start - t_feats
    torch.save(model.state_dict(), a.exp_dir / f"model_{tag}.pt")
    res = dict(
        feature=spec,
        tag=tag,
        dim=su["dim"],
        input_strategy=su["input_strategy"],
        steps=step,
        epochs=epoch + 1,
        losses=losses,
        dev_cer=dev_hist,
        feature_seconds=t_feats,
        train_seconds=t_train,
        step_seconds=float(np.median(step_s)),
        batch_audio_seconds=a.max_duration,
        test={},
    )
    if fe is not None:
        res.update(
            frontend_seconds=float(np.median(fe_s)),
            frontend_grad_abs_sum=grads,
            skipped_steps=skipped,
            frontend_params={
                k: v.detach().cpu().flatten().tolist()
                for k, v in (
                    ("fc", fe.model.filterbank.fc),
                    ("erb_scale", fe.model.filterbank.erb_scale),
                    ("tau", fe.model.adaptation.tau),
                )
            },
            fc_change_rel_max=float(
                (
                    fe.model.filterbank.fc.detach()
                    / fe.model.filterbank.parametrizations.fc[0].init
                    - 1
                )
                .abs()
                .max()
            ),
        )
    # clean and noisy test conditions
    conds = [("clean", cs["test"])] + [
        (f"snr{snr:g}", mix_with_noise(cs["test"], cs["noise"], [snr], a.seed + 100 + i))
        for i, snr in enumerate(a.snrs)
    ]
    pre = not audio and a.input_strategy == "precomputed"
    for name, cuts in conds:
        r = evaluate(model, cuts, strategy, a, tok, audio)
        entry = {"cer": r["cer"], "blank_cer": 1.0, "examples": r["examples"]}
        if pre and a.exact_mix_eval and name != "clean":
            ex = su["extractor"]
            raw = mix_with_noise(
                resample_like(splits["test"], ex),
                resample_like(noise, ex),
                [float(name[3:])],
                a.seed + 100 + a.snrs.index(float(name[3:])),
            )
            entry["cer_exact_mix"] = evaluate(model, raw, OnTheFlyFeatures(ex), a, tok)["cer"]
        res["test"][name] = entry
        log.info(
            "%s %s CER %.3f%s",
            tag,
            name,
            r["cer"],
            f" (exact mix {entry['cer_exact_mix']:.3f})" if "cer_exact_mix" in entry else "",
        )
    return res


def resample_like(cuts: CutSet, ex) -> CutSet:
    sr = getattr(ex.config, "sampling_rate", None)
    return cuts.resample(sr) if sr is not None and cuts[0].sampling_rate != sr else cuts


@torch.no_grad()
def evaluate(model, cuts: CutSet, strategy, a, tok, audio: bool = False) -> dict:
    model.eval()
    refs, hyps = [], []
    for batch in loader(cuts, strategy, a.max_duration, False, 0):
        x, lens, texts, _, _ = batch_tensors(batch, tok, audio=audio)
        lp, olens = model(x.to(a.device), lens.to(a.device))
        hyps += [tok.decode(h) for h in greedy_decode(lp, olens)]
        refs += texts
    model.train()
    return {"cer": cer(refs, hyps), "examples": list(zip(refs[:3], hyps[:3]))}


# ------------------------------------------------------------------------------- learnable
LEARNABLE = "dau1997-learnable"


class _Relative(torch.nn.Module):
    """Parametrisation ``value = init * exp(v)`` (``v`` starts at 0): optimizer steps are
    relative changes, signs and zeros of ``init`` are kept (real or complex)."""

    def __init__(self, init: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("init", init.detach().clone())

    def forward(self, v: torch.Tensor) -> torch.Tensor:
        return self.init * torch.exp(v)

    def right_inverse(self, value: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(value)


class _StablePoles(torch.nn.Module):
    """Parametrisation of complex poles ``r exp(i theta)`` by a complex ``u`` (starts at 0):
    ``1 - r = (1 - r0) exp(Re u)`` and ``theta = theta0 exp(Im u)``: steps are relative
    changes of bandwidth and centre frequency, and ``r < 1`` (stable) while
    ``Re u < -log(1 - r0)``."""

    def __init__(self, init: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("gap", (1 - init.detach().abs()).clone())
        self.register_buffer("theta", init.detach().angle().clone())

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        r = 1 - self.gap * torch.exp(u.real)
        th = self.theta * torch.exp(u.imag)
        return torch.complex(r * torch.cos(th), r * torch.sin(th))

    def right_inverse(self, value: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(value)


class AuditoryFrontEnd(torch.nn.Module):
    """The whole ``Dau1997(fs, flow, fhigh, learnable=True)`` (gammatone filterbank, IHC,
    adaptation loops, modulation filterbank) on raw audio, mean-pooled to 10-ms frames.

    ``forward(audio (B, T), lengths (B,) samples)`` returns ``(B, F, D)`` features, ``D =
    sum over channels of their modulation bands`` (248 at the defaults, the columns of the
    ``amt-dau1997`` extractor in its compact layout), and the frame counts ``F_b =
    compute_num_frames_from_samples(lengths[b])``. Frame ``j`` is the mean of the model
    output over samples ``[j hop, (j + 1) hop)`` cut at the item's end, so at the initial
    parameters the features equal the extractor's (up to float32 vs float64 recursions).
    Audio is on the AMT level scale (rms 1 = 100 dB SPL), as the extractor's default.

    Every parameter is re-parametrised for the optimizer (``torch.nn.utils.parametrize``):
    centre frequencies, bandwidth scales, loop time constants, IHC coefficients and
    modulation gains as ``init * exp(v)``, modulation poles by log-bandwidth and
    log-frequency (always stable), so one learning rate is a relative step for all.
    """

    def __init__(self, fs: int, flow: float, fhigh: float, frame_shift: float = 0.01) -> None:
        super().__init__()
        from torch.nn.utils import parametrize

        self.model = lhotse_amt.Dau1997(fs, flow=flow, fhigh=fhigh, learnable=True)
        self.fs = int(fs)
        self.hop = int(round(frame_shift * fs))
        for mod_name, par in [
            (n.rsplit(".", 1)[0], n.rsplit(".", 1)[1])
            for n, _ in list(self.model.named_parameters())
        ]:
            mod = self.model.get_submodule(mod_name)
            init = getattr(mod, par)
            fn = _StablePoles(init) if par == "poles" else _Relative(init)
            parametrize.register_parametrization(mod, par, fn)
        mfc = self.model.modulation.mfc_padded.detach()
        self.register_buffer("cols", torch.nonzero(~torch.isnan(mfc.reshape(-1)))[:, 0])

    @property
    def num_features(self) -> int:
        return int(self.cols.numel())

    def num_frames(self, lengths: torch.Tensor) -> torch.Tensor:
        return (lengths + self.hop // 2) // self.hop  # compute_num_frames_from_samples

    def forward(
        self, audio: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        out, _ = self.model.stream(audio, upto="modulation")
        y = out["modulation"]  # (B, C, M, T) model units
        B, C, M, T = y.shape
        y = y.reshape(B, C * M, T).index_select(1, self.cols)
        nf = -(-T // self.hop)
        f = frame_mean(y, self.hop, nf, lengths)  # the extractors' frame definition
        return f.transpose(1, 2), self.num_frames(lengths).clamp(min=1, max=nf)


class FeatureNorm(torch.nn.Module):
    """Learned per-feature normalisation ``(x - (m0 + s0 b)) / (s0 exp(g))`` of ``(B, F, D)``
    features, ``b`` and ``g`` starting at 0: at the start it is the fixed-feature runs'
    global mean/variance normalisation (``m0``, ``s0``: statistics of the initial front
    end's features on the train cuts); training moves offset and scale in units of
    ``s0`` (a learned affine, unlike BatchNorm no batch statistics at test time)."""

    def __init__(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("mean", mean.float())
        self.register_buffer("std", std.float())
        self.shift = torch.nn.Parameter(torch.zeros_like(self.mean))
        self.log_scale = torch.nn.Parameter(torch.zeros_like(self.mean))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean - self.std * self.shift) / (self.std * torch.exp(self.log_scale))


class LearnableRecognizer(torch.nn.Module):
    """Front end -> :class:`FeatureNorm` -> the recognizer (its own normalisation the
    identity). ``forward(audio (B, T), lengths (B,) samples)`` -> log-probs, lengths."""

    def __init__(self, frontend: AuditoryFrontEnd, norm: FeatureNorm, rec) -> None:
        super().__init__()
        self.frontend, self.norm, self.rec = frontend, norm, rec

    def forward(self, audio: torch.Tensor, lengths: torch.Tensor):
        feats, flens = self.frontend(audio, lengths)
        return self.rec(self.norm(feats), flens)


@torch.no_grad()
def frontend_stats(fe: AuditoryFrontEnd, cuts: CutSet, a, limit: int = 300) -> tuple:
    """Per-feature mean and standard deviation of the front end's features over (up to
    ``limit``) train cuts (as :func:`norm_stats` for the fixed features)."""
    s = s2 = None
    n = 0
    sub = cuts.subset(first=min(limit, len(cuts)))
    for batch in tqdm(
        loader(sub, AudioSamples(), a.max_duration, False, 0),
        desc="front-end stats",
        disable=a.quiet,
        leave=False,
    ):
        x, lens, _, _, _ = batch_tensors(batch, CharTokenizer(), audio=True)
        f, fl = fe(x, lens)
        m = (torch.arange(f.shape[1])[None] < fl[:, None]).to(torch.float64)[..., None]
        f = f.double() * m
        s = f.sum((0, 1)) if s is None else s + f.sum((0, 1))
        s2 = (f**2).sum((0, 1)) if s2 is None else s2 + (f**2).sum((0, 1))
        n += int(fl.sum())
    mean = s / n
    std = torch.sqrt(torch.clamp(s2 / n - mean**2, min=1e-8))
    std = torch.maximum(std, 1e-3 * std.max())
    return mean.float(), std.float()


def frontend_grads(fe: AuditoryFrontEnd) -> dict[str, float]:
    """Sum of |gradient| per front-end parameter (the parametrisations' originals, named by
    the model parameter: ``filterbank.fc``, ``modulation.poles``, ...); NaN where a
    gradient is not finite, 0 where none arrived."""
    out = {}
    for n, p in fe.model.named_parameters():
        name = n.replace("parametrizations.", "").replace(".original", "")
        g = p.grad
        if g is None:
            out[name] = 0.0
        else:
            out[name] = float(g.abs().sum()) if bool(torch.isfinite(g).all()) else float("nan")
    return out


# ------------------------------------------------------------------------------- report
def report(results: list[dict], a) -> str:
    conds = ["clean"] + [f"snr{s:g}" for s in a.snrs]
    head = (
        "| features | dim | input | steps | s/step | "
        + " | ".join("clean" if c == "clean" else f"SNR {c[3:]} dB" for c in conds)
        + " |"
    )
    lines = [head, "|" + "---|" * (5 + len(conds))]
    for r in results:
        cells = []
        for c in conds:
            e = r["test"][c]
            s = f"{100 * e['cer']:.1f}"
            if "cer_exact_mix" in e:
                s += f" ({100 * e['cer_exact_mix']:.1f})"
            cells.append(s)
        lines.append(
            f"| {r['feature']} | {r['dim']} | {r['input_strategy']} | {r['steps']} | "
            f"{r['step_seconds']:.2f} | " + " | ".join(cells) + " |"
        )
    lines.append("")
    lines.append(
        "CER in %, greedy CTC decoding; predicting only blanks gives 100 %. "
        "In parentheses: features of the mixed audio (exact) instead of the lazy "
        "feature-domain mix of the stored features. dau1997-learnable: raw audio (the noisy "
        "conditions are the mixed audio, exact). s/step: median wall time of a training step."
    )
    return "\n".join(lines) + "\n"


def plot(results: list[dict], a, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    conds = ["clean"] + [f"snr{s:g}" for s in a.snrs]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    w = 0.8 / max(1, len(results))
    for k, r in enumerate(results):
        x = np.arange(len(conds)) + (k - (len(results) - 1) / 2) * w
        ax1.bar(x, [100 * r["test"][c]["cer"] for c in conds], w, label=r["feature"])
        ls = np.array(r["losses"])
        kk = max(1, len(ls) // 50)
        ax2.plot(np.convolve(ls, np.ones(kk) / kk, mode="valid"), label=r["feature"])
    ax1.set_xticks(
        range(len(conds)), ["clean" if c == "clean" else f"{c[3:]} dB SNR" for c in conds]
    )
    ax1.set_ylabel("CER (%)")
    ax1.axhline(100, color="k", lw=0.8, ls=":")
    ax1.legend(fontsize=7)
    ax1.set_title("test CER")
    ax2.set_yscale("log")
    ax2.set_xlabel("step")
    ax2.set_ylabel("CTC loss")
    ax2.set_title("training loss")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    a = get_args(argv)
    torch.set_num_threads(a.threads)
    a.exp_dir.mkdir(parents=True, exist_ok=True)
    tok = CharTokenizer()
    splits, noise = load_data(a)
    results = []
    out: dict = {"args": {k: str(v) for k, v in vars(a).items()}, "results": results}
    for spec in list(a.features) + ([LEARNABLE] if a.learnable_frontend else []):
        results.append(train_one(spec, splits, noise, a, tok))
        (a.exp_dir / "results.json").write_text(json.dumps(out, indent=1))
    md = report(results, a)
    for r in results:
        if "frontend_grad_abs_sum" not in r:
            continue
        g0 = r["frontend_grad_abs_sum"][0]
        bad = {k: v for k, v in g0.items() if not math.isfinite(v)}
        assert not bad, f"non-finite front-end gradients at the first step: {bad}"
        assert g0["filterbank.fc"] > 0, "no gradient reached the gammatone centre frequencies"
        md += (
            f"\nLearnable front end: {r['dim']} features at {a.learnable_fs} Hz; "
            f"{r['step_seconds']:.2f} s per training step of {a.max_duration:g} s of audio "
            f"(median), of which front end forward + backward {r['frontend_seconds']:.2f} s; "
            f"{r['skipped_steps']} steps skipped (non-finite gradient); largest relative "
            f"change of a centre frequency {100 * r['fc_change_rel_max']:.2f} %; sum "
            "|gradient| per parameter at the first step: "
            + ", ".join(f"{k} {v:.3g}" for k, v in g0.items())
            + ".\n"
        )
    (a.exp_dir / "results.json").write_text(json.dumps(out, indent=1))
    (a.exp_dir / "results.md").write_text(md)
    plot(results, a, a.exp_dir / "cer.png")
    print(md)
    if a.smoke:
        for r in results:
            k = max(1, min(4, len(r["losses"]) // 4))
            first, last = np.mean(r["losses"][:k]), np.mean(r["losses"][-k:])
            assert last < first, f"{r['feature']}: training loss did not fall ({first} -> {last})"
    return out


if __name__ == "__main__":
    main()
