#!/usr/bin/env python
"""Write a small synthetic corpus like a ``lhotse prepare`` output directory: espeak-ng
speech (several voices, speeds, pitches; random sentences from a fixed word list;
deterministic seeds) as ``synth_{recordings,supervisions}_{split}.jsonl.gz`` and
synthetic noise recordings as ``noise_recordings.jsonl.gz``. Nothing is downloaded."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common.synth import make_noise, make_speech_corpus  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--out-dir", type=Path, default=Path("data/synth"))
    p.add_argument("--num-train", type=int, default=20)
    p.add_argument("--num-dev", type=int, default=5)
    p.add_argument("--num-test", type=int, default=5)
    p.add_argument("--num-noise", type=int, default=2)
    p.add_argument("--noise-duration", type=float, default=10.0)
    p.add_argument("--sampling-rate", type=int, default=16000)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    splits = {"train": a.num_train, "dev": a.num_dev, "test": a.num_test}
    paths = make_speech_corpus(
        a.out_dir,
        {k: v for k, v in splits.items() if v > 0},
        sampling_rate=a.sampling_rate,
        seed=a.seed,
    )
    if a.num_noise:
        paths["noise"] = (
            make_noise(a.out_dir, a.num_noise, a.noise_duration, a.sampling_rate),
            None,
        )
    for split, (rec, sup) in paths.items():
        print(f"{split}: {rec}" + (f" + {sup}" if sup else ""))


if __name__ == "__main__":
    main()
