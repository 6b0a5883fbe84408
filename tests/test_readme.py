"""The README's promises: its Quick start (every Python block) runs as pasted, and its two
set-up commands are the ones CI (``.ci/run``) runs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
CI = (ROOT / ".ci" / "run").read_text()
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def _section(title: str) -> str:
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", README, re.S | re.M)
    assert m is not None, f"README has no '## {title}' section"
    return m.group(1)


def _blocks(text: str, lang: str) -> list[str]:
    return [body for kind, body in _FENCE.findall(text) if kind == lang]


PYTHON_BLOCKS = _blocks(README, "python")


def test_quick_start_has_code():
    assert len(_blocks(_section("Quick start"), "python")) >= 2


@pytest.mark.parametrize("index", range(len(PYTHON_BLOCKS)))
def test_python_block_runs_as_pasted(index, tmp_path):
    block = PYTHON_BLOCKS[index]
    script = tmp_path / "snippet.py"
    script.write_text(block)
    r = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=400
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip(), "each block prints what it computed"
    if "for ex in" in block:  # every extractor the block builds printed a shape
        for name in re.findall(r"lhotse_amt\.(\w+)Extractor\(", block):
            assert re.search(rf"amt-{name.lower()} .*\(\d+, \d+\)", r.stdout), r.stdout


def test_worker_processes_are_started_under_a_main_guard():
    for block in _blocks(README, "python"):
        jobs = [int(n) for n in re.findall(r"num_jobs\s*=\s*(\d+)", block)]
        if any(n > 1 for n in jobs):
            guard = block.index('if __name__ == "__main__":')
            assert guard < block.index("num_jobs"), block


def _one_line_commands() -> list[str]:
    blocks = _blocks(_section("Set up"), "bash")
    commands = [b.strip() for b in blocks]
    assert all("\n" not in c for c in commands), "a set-up command is one line"
    return commands


def test_readme_shows_exactly_two_set_up_commands():
    demo, tests = _one_line_commands()
    assert demo.endswith("lhotse-amt amt demo amt_demo")
    assert tests.endswith("python -m pytest -q tests")
    # both install the same torch build first, then the package
    torch_step = demo.split(" && ")[0]
    assert torch_step.startswith("pip install torch==") and tests.startswith(torch_step + " && ")
    # no other fenced block tells a reader to install something
    others = [b for _, b in _FENCE.findall(README) if b.strip() not in (demo, tests)]
    assert not [b for b in others if "pip install" in b]


def test_ci_runs_the_readme_test_command():
    _, tests = _one_line_commands()
    ci_lines = [line.strip() for line in CI.splitlines()]
    assert tests in ci_lines, ".ci/run must run the README's test command as written"
    # CI's own (quiet) install before linting is the same install, and lint covers the code
    install = tests.rsplit(" && ", 1)[0]
    quiet = [line for line in ci_lines if line.startswith("pip install -q")]
    assert [line.replace(" -q", "") for line in quiet] == [install]
    for tool in ("ruff check", "ruff format --check"):
        (line,) = [line for line in ci_lines if line.startswith(tool)]
        assert line.split()[-4:] == ["lhotse_amt", "tests", "benchmarks", "recipes"]
