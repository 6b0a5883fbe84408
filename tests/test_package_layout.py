"""The package's layout: no source file over 600 lines, and the kernels below everything
else (a module of ``lhotse_amt.kernels`` imports no module of the layers that call it:
``functional``, ``modules``, ``models``, ``ops``, ``features``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import lhotse_amt

PACKAGE = Path(lhotse_amt.__file__).parent
SOURCES = sorted(PACKAGE.rglob("*.py"))
CALLERS = ("functional", "modules", "models", "ops", "features")


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_source_file_has_at_most_600_lines(path: Path) -> None:
    n = len(path.read_text().splitlines())
    assert n <= 600, f"{path.relative_to(PACKAGE)}: {n} lines"


def _imported_packages(path: Path) -> set[str]:
    """The first component below ``lhotse_amt`` of every module ``path`` imports."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the importing module's package
                base = list(parts[: len(parts) - node.level])
                mod = base + (node.module.split(".") if node.module else [])
                names = [mod + [a.name] for a in node.names] if not node.module else [mod]
            else:
                names = [(node.module or "").split(".")]
        elif isinstance(node, ast.Import):
            names = [a.name.split(".") for a in node.names]
        else:
            continue
        for name in names:
            if len(name) > 1 and name[0] == "lhotse_amt":
                found.add(name[1])
    return found


@pytest.mark.parametrize("path", sorted((PACKAGE / "kernels").glob("*.py")), ids=lambda p: p.name)
def test_kernels_import_none_of_their_callers(path: Path) -> None:
    assert not _imported_packages(path) & set(CALLERS)


def test_the_import_check_sees_relative_imports() -> None:
    # the check above must resolve relative imports (a test that cannot fail is no test)
    assert "functional" in _imported_packages(PACKAGE / "ops" / "loudness_fast.py")
    assert "kernels" in _imported_packages(PACKAGE / "ops" / "agc_stream.py")
