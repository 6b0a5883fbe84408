#!/usr/bin/env python
"""Lhotse manifests of the Free Spoken Digit Dataset (FSDD).

FSDD (Jackson et al., github.com/Jakobovski/free-spoken-digit-dataset, CC BY-SA 4.0):
isolated English digits "0"-"9", 8 kHz mono 16-bit WAV files named
``recordings/{digit}_{speaker}_{index}.wav``. One recording per utterance; the
supervision covers the whole recording, its text is the digit word (``"zero"`` ...
``"nine"``), its speaker the speaker name, and ``custom`` holds the digit (int) and the
index. The recordings are read in place from the directory the user gives; nothing is
copied.

    python recipes/digits/prepare.py /path/to/fsdd data/fsdd_manifests
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from lhotse import Recording, RecordingSet, SupervisionSegment, SupervisionSet
from lhotse.qa import validate_recordings_and_supervisions

__all__ = ["DIGIT_WORDS", "prepare_fsdd", "parse_name"]

#: supervision text of each digit
DIGIT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")

_NAME = re.compile(r"^(?P<digit>[0-9])_(?P<speaker>[A-Za-z][A-Za-z0-9-]*)_(?P<index>[0-9]+)$")


def parse_name(stem: str) -> tuple[int, str, int]:
    """``"3_george_17"`` -> ``(3, "george", 17)``; a name of another form is a ValueError."""
    m = _NAME.match(stem)
    if m is None:
        raise ValueError(
            f"FSDD file name {stem!r} is not of the form '{{digit}}_{{speaker}}_{{index}}' "
            "(digit 0-9, speaker a name, index an integer)"
        )
    return int(m.group("digit")), m.group("speaker"), int(m.group("index"))


def prepare_fsdd(
    corpus_dir: str | Path, output_dir: str | Path | None = None
) -> dict[str, RecordingSet | SupervisionSet]:
    """Recordings and supervisions of FSDD.

    Args:
        corpus_dir: the FSDD directory (containing ``recordings/``), or the
            ``recordings`` directory itself.
        output_dir: if given, ``fsdd_recordings.jsonl.gz`` and
            ``fsdd_supervisions.jsonl.gz`` are written there (created if missing).

    Returns:
        ``{"recordings": RecordingSet, "supervisions": SupervisionSet}``, sorted by id;
        recording id = supervision id = the file stem (``"3_george_17"``). Validated with
        Lhotse's ``validate_recordings_and_supervisions``.
    """
    corpus_dir = Path(corpus_dir)
    if not corpus_dir.is_dir():
        raise FileNotFoundError(f"FSDD corpus_dir {str(corpus_dir)!r} is not a directory")
    wav_dir = corpus_dir / "recordings" if (corpus_dir / "recordings").is_dir() else corpus_dir
    wavs = sorted(wav_dir.glob("*.wav"))
    if not wavs:
        raise FileNotFoundError(f"no *.wav files in {str(wav_dir)!r} (expected FSDD recordings)")
    recordings, supervisions = [], []
    for wav in wavs:
        digit, speaker, index = parse_name(wav.stem)
        rec = Recording.from_file(wav, recording_id=wav.stem)
        recordings.append(rec)
        supervisions.append(
            SupervisionSegment(
                id=wav.stem,
                recording_id=wav.stem,
                start=0.0,
                duration=rec.duration,
                channel=0,
                text=DIGIT_WORDS[digit],
                language="English",
                speaker=speaker,
                custom={"digit": digit, "index": index},
            )
        )
    recs = RecordingSet.from_recordings(recordings)
    sups = SupervisionSet.from_segments(supervisions)
    validate_recordings_and_supervisions(recs, sups)
    if output_dir is not None:
        out = Path(output_dir)
        out.mkdir(parents=True, exist_ok=True)
        recs.to_file(out / "fsdd_recordings.jsonl.gz")
        sups.to_file(out / "fsdd_supervisions.jsonl.gz")
    return {"recordings": recs, "supervisions": sups}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("corpus_dir", type=Path, help="FSDD directory (with recordings/)")
    p.add_argument("output_dir", type=Path, help="where the manifests are written")
    a = p.parse_args(argv)
    m = prepare_fsdd(a.corpus_dir, a.output_dir)
    speakers = sorted({s.speaker for s in m["supervisions"]})
    print(f"{len(m['recordings'])} recordings, speakers {speakers} -> {a.output_dir}")


if __name__ == "__main__":
    main()
