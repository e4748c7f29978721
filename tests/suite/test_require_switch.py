"""The suite's own switches (tests/conftest.py), run for real: pytest in a subprocess over a scratch suite
that uses the very same conftest, so what CI relies on (PALAESTRA_REQUIRE turning skips into failures,
the ``fuzz`` variants deselected rather than skipped) is checked the way CI runs it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

CONFTEST = Path(__file__).parents[1] / "conftest.py"

SCRATCH = '''
import pytest

def test_runs():
    assert True

def test_docker_missing():
    pytest.skip("docker: no engine can start here")

def test_browser_missing():
    pytest.skip("browser: no chromium")

def test_unnamed_skip():
    pytest.skip("something is off")

@pytest.mark.xfail(reason="known", strict=True)
def test_known_bug():
    raise AssertionError

@pytest.mark.fuzz
def test_long_variant():
    raise AssertionError("the long variant must not run by default")
'''
MODULE_SKIP = '''
import pytest
pytest.importorskip("palaestra_no_such_module", reason="mlflow: not installed")

def test_never_collected():
    pass
'''


def run_scratch(tmp_path: Path, require: str | None, *args: str, **extra_env: str) -> tuple[int, dict[str, str], str]:
    """Outcome per test name ('passed', 'skipped', 'failed', 'error', 'xfailed') and pytest's exit code."""
    suite = tmp_path / "suite"
    if not suite.exists():
        suite.mkdir()
        shutil.copy(CONFTEST, suite / "conftest.py")
        (suite / "test_scratch.py").write_text(SCRATCH)
        (suite / "test_module_skip.py").write_text(MODULE_SKIP)
        (suite / "pytest.ini").write_text("[pytest]\nmarkers =\n    fuzz: long variant\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PALAESTRA_REQUIRE", "PALAESTRA_FUZZ"))}
    if require is not None:
        env["PALAESTRA_REQUIRE"] = require
    env.update(extra_env)
    junit = tmp_path / f"junit-{len(list(tmp_path.glob('junit-*')))}.xml"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly",
                           "--continue-on-collection-errors", f"--junitxml={junit}", "-rs", *args, str(suite)],
                          cwd=suite, env=env, capture_output=True, text=True, timeout=120)
    outcomes: dict[str, str] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = case.get("name") or ""
        if not name:  # a collection report is named after its module
            name = (case.get("classname") or "").rsplit(".", 1)[-1]
        tags = {child.tag for child in case}
        skipped = case.find("skipped")
        if skipped is not None and skipped.get("type") == "pytest.xfail":
            outcomes[name] = "xfailed"
        elif "failure" in tags:
            outcomes[name] = "failed"
        elif "error" in tags:
            outcomes[name] = "error"
        elif "skipped" in tags:
            outcomes[name] = "skipped"
        else:
            outcomes[name] = "passed"
    return proc.returncode, outcomes, proc.stdout + proc.stderr


def test_without_the_switch_skips_stay_skips_and_fuzz_is_deselected(tmp_path: Path) -> None:
    code, got, out = run_scratch(tmp_path, None)
    assert code == 0, out
    assert got["test_runs"] == "passed" and got["test_known_bug"] == "xfailed"
    assert got["test_docker_missing"] == got["test_browser_missing"] == got["test_unnamed_skip"] == "skipped"
    assert "test_long_variant" not in got and "1 deselected" in out  # not run, and not a skip either
    assert got["test_module_skip"] == "skipped" and "test_never_collected" not in got


def test_require_all_fails_every_skip_but_not_the_deselected_fuzz(tmp_path: Path) -> None:
    code, got, out = run_scratch(tmp_path, "all")
    assert code != 0
    failed = {n for n, o in got.items() if o in ("failed", "error")}
    assert {"test_docker_missing", "test_browser_missing", "test_unnamed_skip"} <= failed, got
    assert "capability 'docker' is required" in out and "names no known capability" in out
    assert got["test_module_skip"] in ("failed", "error"), got  # a module skipped at import counts as well
    assert got["test_runs"] == "passed" and got["test_known_bug"] == "xfailed"
    assert "test_long_variant" not in got and "1 deselected" in out


def test_require_all_less_some_and_a_list(tmp_path: Path) -> None:
    _, got, _ = run_scratch(tmp_path, "all,-docker,-mlflow")
    assert got["test_docker_missing"] == "skipped" and got["test_module_skip"] == "skipped"
    assert got["test_browser_missing"] in ("failed", "error")
    _, got, _ = run_scratch(tmp_path, "docker")
    assert got["test_docker_missing"] in ("failed", "error") and got["test_browser_missing"] == "skipped"
    assert got["test_module_skip"] == "skipped"
    assert got["test_unnamed_skip"] in ("failed", "error")  # cannot be told apart from a required one


def test_the_older_browser_switch(tmp_path: Path) -> None:
    _, got, _ = run_scratch(tmp_path, None, PALAESTRA_REQUIRE_BROWSER="1")
    assert got["test_browser_missing"] in ("failed", "error") and got["test_docker_missing"] == "skipped"


def test_a_misspelt_capability_is_a_usage_error(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    shutil.copy(CONFTEST, suite / "conftest.py")
    (suite / "test_x.py").write_text("def test_x():\n    pass\n")
    env = {**os.environ, "PALAESTRA_REQUIRE": "dokcer"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", str(suite)], cwd=suite,
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout + proc.stderr
    assert "unknown capabilities ['dokcer']" in proc.stdout + proc.stderr
