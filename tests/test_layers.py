"""The package's shape, checked: the layer and no-cycle contracts of pyproject.toml ([tool.importlinter],
drawn in docs/architecture.md) hold, and no module grows past the size a reader can hold in mind."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "palaestra"
MAX_LINES = 400


def test_layer_contracts_hold() -> None:
    """Every contract is kept: layers (nothing imports upward, server and client never import each other)
    and acyclic siblings (no import cycle between modules or packages at any depth). A new top-level
    module must be given its layer: the layers contract is exhaustive."""
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    assert lint, "lint-imports not found: import-linter is in the [dev] extra (pip install -e '.[dev]')"
    proc = subprocess.run([lint, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout and " broken" in proc.stdout, proc.stdout[-2000:]


def test_every_top_level_module_has_a_layer() -> None:
    """The contract names every package and module at the top (so the exhaustive check above means what
    it says, and docs/architecture.md can say where each concept lives)."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    layers = next(c for c in config["contracts"] if c["type"] == "layers")["layers"]
    declared = {part.strip(" ()") for layer in layers for part in layer.split("|")}
    tops = {p.stem if p.is_file() else p.name for p in SRC.iterdir()
            if (p.is_dir() and (p / "__init__.py").exists()) or (p.suffix == ".py" and p.name != "__init__.py")}
    assert tops - declared == set(), f"give these a layer in pyproject.toml: {sorted(tops - declared)}"


def test_no_module_over_the_line_limit() -> None:
    """A module over the limit holds more than one concept: split it by concept, not by line count."""
    over = {}
    for path in sorted(SRC.rglob("*.py")):
        with path.open(encoding="utf-8") as fh:
            n = sum(1 for _ in fh)
        if n > MAX_LINES:
            over[str(path.relative_to(ROOT))] = n
    assert not over, f"modules over {MAX_LINES} lines: {over}"
