"""``palaestra env new``: the scaffold passes ``env check`` and its own generated test as generated, and
the adapter commands work once mounted the way ``cli/main.py`` mounts them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from palaestra.cli import adapt_cmds, env_cmds
from palaestra.core.errors import ConfigError
from palaestra.rollout.conformance import check_env
from palaestra.scaffold import new_env


def mounted() -> typer.Typer:
    """The root app as main.py mounts these commands: env new, env import harbor, export nemo-gym."""
    env = typer.Typer()
    for command in env_cmds.app.registered_commands:
        env.registered_commands.append(command)
    env.command("new")(adapt_cmds.env_new)
    env.add_typer(adapt_cmds.import_app, name="import")
    root = typer.Typer()
    root.add_typer(env, name="env")
    root.add_typer(adapt_cmds.export_app, name="export")
    return root


def test_env_new_passes_env_check_as_generated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    res = runner.invoke(mounted(), ["env", "new", "shop-keeper", "--dir", "envs/shop"])
    assert res.exit_code == 0, res.output
    assert "palaestra env check envs/shop/env.py:ShopKeeper" in res.output
    root = tmp_path / "envs" / "shop"
    assert {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()} == {
        "__init__.py", "env.py", "README.md", "data/examples.jsonl", "tests/test_shop_keeper.py"}
    rows = [json.loads(line) for line in (root / "data" / "examples.jsonl").read_text().splitlines()]
    assert len(rows) >= 3 and all(r["metadata"]["reference"]["tool_calls"] for r in rows)
    readme = (root / "README.md").read_text()
    assert readme.startswith("# shop-keeper") and "## Reward" in readme and "metadata.expected" in readme

    res = runner.invoke(mounted(), ["env", "check", "./envs/shop/env.py:ShopKeeper"])
    assert res.exit_code == 0, res.output
    assert res.output.count("ok") >= 7 and "FAIL" not in res.output

    # the generated test passes too, run by pytest from the new package's directory
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], cwd=root,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "2 passed" in proc.stdout


async def test_generated_env_in_a_local_process(tmp_path: Path) -> None:
    new_env("kv", tmp_path / "kv")
    report = await check_env(f"{tmp_path / 'kv' / 'env.py'}:Kv", "local")
    assert report.ok, [f"{r.name}: {r.detail}" for r in report.results if not r.ok]


def test_env_new_refuses_bad_names_and_overwrites(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid"):
        new_env("Bad Name", tmp_path / "x")
    new_env("ok", tmp_path / "ok")
    before = (tmp_path / "ok" / "env.py").read_text()
    with pytest.raises(ConfigError, match="not overwriting"):
        new_env("ok", tmp_path / "ok")
    assert (tmp_path / "ok" / "env.py").read_text() == before
    res = CliRunner().invoke(mounted(), ["env", "new", "ok", "--dir", str(tmp_path / "ok")])
    assert res.exit_code == 2 and "not overwriting" in res.output


def test_import_and_export_commands_when_mounted(tmp_path: Path) -> None:
    task = tmp_path / "ds" / "t1"
    (task / "tests").mkdir(parents=True)
    (task / "instruction.md").write_text("Do it.\n")
    (task / "tests" / "test.sh").write_text("#!/bin/sh\nexit 0\n")
    runner = CliRunner()
    res = runner.invoke(mounted(), ["env", "import", "harbor", str(tmp_path / "ds")])
    assert res.exit_code == 0, res.output
    row = json.loads(res.stdout.strip().splitlines()[0])
    assert row["id"] == "harbor-t1" and row["metadata"]["task_dir"] == str(task.resolve())
    res = runner.invoke(mounted(), ["export", "nemo-gym", str(tmp_path), "--out", str(tmp_path / "o.jsonl")])
    assert res.exit_code == 2 and "not a run directory" in res.output
