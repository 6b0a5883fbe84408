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

``--learnable-frontend`` adds the differentiable configuration: ``lhotse_amt.Dau1997(...,
learnable=True)`` inside the model on raw audio for a few steps, checking that gradients
reach the gammatone centre frequencies.

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
        nargs="+",
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
    lf.add_argument("--learnable-frontend", action="store_true")
    lf.add_argument("--learnable-steps", type=int, default=3)
    lf.add_argument("--learnable-fs", type=int, default=8000)
    lf.add_argument("--learnable-flow", type=float, default=300.0)
    lf.add_argument("--learnable-fhigh", type=float, default=3000.0)
    lf.add_argument(
        "--learnable-max-cut",
        type=float,
        default=0.8,
        help="use train cuts up to this duration (s): the loops' gradient is slow",
    )
    lf.add_argument("--learnable-batch", type=int, default=2)
    p.add_argument("--exp-dir", type=Path, default=Path("exp/asr"))
    p.add_argument(
        "--smoke",
        action="store_true",
        help="tiny corpus and model, few steps; asserts the loss falls",
    )
    p.add_argument("--quiet", action="store_true")
    a = p.parse_args(argv)
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
def train_one(spec: str, splits, noise, a, tok) -> dict:
    tag = spec_tag(spec)
    t_start = time.perf_counter()
    ex, cs = with_features(spec, splits, noise, a)
    t_feats = time.perf_counter() - t_start
    pre = a.input_strategy == "precomputed"
    strategy = PrecomputedFeatures() if pre else OnTheFlyFeatures(ex)
    train_cuts = cs["train"]
    if a.train_snrs:
        train_cuts = mix_with_noise(train_cuts, cs["noise"], a.train_snrs, a.seed + 7, 0.5)
    mean, std = norm_stats(cs["train"], ex, pre)
    dim = int(mean.numel())
    torch.manual_seed(a.seed)
    model = CTCRecognizer(
        dim, tok.vocab_size, a.hidden, a.conv_channels, a.layers, mean, std, subsample=a.subsample
    )
    model.to(a.device)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=1e-2)
    total_dur = sum(c.duration for c in train_cuts)
    steps_per_epoch = max(1, math.ceil(total_dur / a.max_duration))
    total = steps_per_epoch * a.epochs
    if a.max_steps:
        total = min(total, a.max_steps)
    sched = torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=a.lr, total_steps=total + 1, pct_start=0.15
    )
    ctc = torch.nn.CTCLoss(blank=0, zero_infinity=True)
    losses, dev_hist = [], []
    best = (float("inf"), None)
    step = 0
    stop = False
    bar = tqdm(total=total, desc=f"train {tag}", disable=a.quiet)
    for epoch in range(a.epochs):
        model.train()
        dl = loader(train_cuts, strategy, a.max_duration, True, a.seed + epoch)
        dl.sampler.set_epoch(epoch)
        for batch in dl:
            x, lens, _, ys, ylens = batch_tensors(batch, tok)
            lp, olens = model(x.to(a.device), lens.to(a.device))
            loss = ctc(lp.transpose(0, 1), ys, olens, ylens)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            opt.step()
            sched.step()
            losses.append(float(loss.detach()))
            step += 1
            bar.update(1)
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
            minutes = (time.perf_counter() - t_start - t_feats) / 60
            if step >= total or (a.max_minutes and minutes > a.max_minutes):
                stop = True
                break
        dcer = evaluate(model, cs["dev"], strategy, a, tok)["cer"]
        dev_hist.append(dcer)
        log.info(
            "%s epoch %d step %d loss %.3f dev CER %.3f",
            tag,
            epoch,
            step,
            np.mean(losses[-steps_per_epoch:]),
            dcer,
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
        dim=dim,
        input_strategy=a.input_strategy,
        steps=step,
        epochs=epoch + 1,
        losses=losses,
        dev_cer=dev_hist,
        feature_seconds=t_feats,
        train_seconds=t_train,
        test={},
    )
    # clean and noisy test conditions
    conds = [("clean", cs["test"])] + [
        (f"snr{snr:g}", mix_with_noise(cs["test"], cs["noise"], [snr], a.seed + 100 + i))
        for i, snr in enumerate(a.snrs)
    ]
    for name, cuts in conds:
        r = evaluate(model, cuts, strategy, a, tok)
        entry = {"cer": r["cer"], "blank_cer": 1.0, "examples": r["examples"]}
        if pre and a.exact_mix_eval and name != "clean":
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
def evaluate(model, cuts: CutSet, strategy, a, tok) -> dict:
    model.eval()
    refs, hyps = [], []
    for batch in loader(cuts, strategy, a.max_duration, False, 0):
        x, lens, texts, _, _ = batch_tensors(batch, tok)
        lp, olens = model(x.to(a.device), lens.to(a.device))
        hyps += [tok.decode(h) for h in greedy_decode(lp, olens)]
        refs += texts
    model.train()
    return {"cer": cer(refs, hyps), "examples": list(zip(refs[:3], hyps[:3]))}


# ------------------------------------------------------------------------------- learnable
class AuditoryFrontEnd(torch.nn.Module):
    """``Dau1997(learnable=True)`` up to the adaptation loops, mean-pooled to 10-ms frames."""

    def __init__(self, fs: int, flow: float, fhigh: float) -> None:
        super().__init__()
        self.model = lhotse_amt.Dau1997(fs, flow=flow, fhigh=fhigh, learnable=True)
        self.hop = fs // 100

    def forward(self, audio: torch.Tensor, lengths: torch.Tensor):
        out, _ = self.model.stream(audio, upto="adaptation")
        y = out["adaptation"]  # (B, C, T) model units
        nf = y.shape[-1] // self.hop
        f = y[..., : nf * self.hop].reshape(*y.shape[:2], nf, self.hop).mean(-1)
        return f.transpose(1, 2) / 50.0, (lengths // self.hop).clamp(min=1, max=nf)


def train_learnable(splits, a, tok) -> dict:
    """A few steps with the auditory front end inside the model; checks the gradients."""
    cuts = splits["train"].filter(lambda c: c.duration <= a.learnable_max_cut).to_eager()
    if len(cuts) < a.learnable_batch:
        cuts = splits["train"].sort_by_duration(ascending=True)
    cuts = cuts.resample(a.learnable_fs).subset(first=a.learnable_batch * a.learnable_steps)
    torch.manual_seed(a.seed)
    fe = AuditoryFrontEnd(a.learnable_fs, a.learnable_flow, a.learnable_fhigh)
    rec = CTCRecognizer(fe.model.num_channels, tok.vocab_size, 32, 32, 1)
    params = list(fe.parameters()) + list(rec.parameters())
    opt = torch.optim.Adam(params, lr=1e-3)
    ctc = torch.nn.CTCLoss(blank=0, zero_infinity=True)
    ds = K2SpeechRecognitionDataset(input_strategy=AudioSamples(), return_cuts=True)
    sampler = SimpleCutSampler(cuts, max_cuts=a.learnable_batch, shuffle=False)
    dl = DataLoader(ds, sampler=sampler, batch_size=None)
    res = dict(
        losses=[],
        fc_grad_abs_sum=[],
        seconds=[],
        fs=a.learnable_fs,
        channels=int(fe.model.num_channels),
    )
    fc0 = fe.model.filterbank.fc.detach().clone()
    for step, batch in enumerate(
        tqdm(dl, desc="learnable front end", total=a.learnable_steps, disable=a.quiet)
    ):
        if step >= a.learnable_steps:
            break
        t0 = time.perf_counter()
        x = batch["inputs"]
        lens = torch.tensor([c.num_samples for c in batch["supervisions"]["cut"]])
        _, _, _, ys, ylens = batch_tensors(batch, tok, audio=True)
        feats, flens = fe(x, lens)
        lp, olens = rec(feats, flens)
        loss = ctc(lp.transpose(0, 1), ys, olens, ylens)
        opt.zero_grad()
        loss.backward()
        g = fe.model.filterbank.fc.grad
        assert g is not None and bool(torch.isfinite(g).all()) and float(g.abs().sum()) > 0, (
            "no gradient reached the gammatone centre frequencies"
        )
        opt.step()
        res["losses"].append(float(loss.detach()))
        res["fc_grad_abs_sum"].append(float(g.abs().sum()))
        res["seconds"].append(time.perf_counter() - t0)
        log.info(
            "learnable step %d loss %.3f |d loss / d fc| %.3g (%.1f s)",
            step,
            float(loss.detach()),
            float(g.abs().sum()),
            res["seconds"][-1],
        )
    res["fc_change_hz_max"] = float((fe.model.filterbank.fc.detach() - fc0).abs().max())
    res["grad_params"] = sorted(n for n, p in fe.model.named_parameters() if p.grad is not None)
    return res


# ------------------------------------------------------------------------------- report
def report(results: list[dict], a) -> str:
    conds = ["clean"] + [f"snr{s:g}" for s in a.snrs]
    head = (
        "| features | dim | input | steps | "
        + " | ".join("clean" if c == "clean" else f"SNR {c[3:]} dB" for c in conds)
        + " |"
    )
    lines = [head, "|" + "---|" * (4 + len(conds))]
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
            + " | ".join(cells)
            + " |"
        )
    lines.append("")
    lines.append(
        "CER in %, greedy CTC decoding; predicting only blanks gives 100 %. "
        "In parentheses: features of the mixed audio (exact) instead of the lazy "
        "feature-domain mix of the stored features."
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
    for spec in a.features:
        results.append(train_one(spec, splits, noise, a, tok))
        out = {"args": {k: str(v) for k, v in vars(a).items()}, "results": results}
        (a.exp_dir / "results.json").write_text(json.dumps(out, indent=1))
    md = report(results, a)
    if a.learnable_frontend:
        lr = train_learnable(splits, a, tok)
        out["learnable_frontend"] = lr
        md += (
            f"\nDifferentiable front end (Dau1997 learnable, {lr['channels']} channels at "
            f"{lr['fs']} Hz): losses {', '.join(f'{v:.2f}' for v in lr['losses'])}; "
            f"sum |dL/d fc| per step {', '.join(f'{v:.3g}' for v in lr['fc_grad_abs_sum'])}; "
            f"{np.mean(lr['seconds']):.1f} s per step; parameters with gradients: "
            f"{', '.join(lr['grad_params'])}.\n"
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
