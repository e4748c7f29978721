"""README.md matches reality: every ``palaestra ...`` command it shows resolves to a real command with
real options, its code blocks run as written (the Counter environment passes ``palaestra env check``
through the README's own shell lines), its environment table lists every built-in environment, its
test command is what CI runs, and nothing it names lies outside the repository."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from palaestra.cli.main import app

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def blocks(lang: str) -> list[str]:
    return [body for kind, body in FENCE.findall(README) if kind == lang]


def command_lines() -> list[str]:
    """Every ``palaestra ...`` invocation README shows: shell blocks (one per line, split at && ; |),
    ``$ palaestra`` lines of text blocks, and inline code spans."""
    found: list[str] = []
    for body in blocks("bash") + blocks("text"):
        for line in body.splitlines():
            line = line.removeprefix("$ ").split(" #", 1)[0].strip()
            for part in re.split(r"&&|;|(?<![\[|\w])\|(?![\]|\w])", line):
                part = part.strip()
                if part.startswith("palaestra "):
                    found.append(part)
    prose = FENCE.sub("", README)
    found += [m for m in re.findall(r"`(palaestra [^`]+)`", prose)]
    return sorted(set(found))


def _alternatives(token: str) -> list[str]:
    """``info|run|cleanup`` and ``{sft|dpo}`` are alternatives README writes in one token."""
    return [t for t in token.strip("{}[]").split("|") if t]


def _is_group(command: Any) -> bool:
    return hasattr(command, "list_commands")  # typer's group class (its click is vendored in recent typer)


def _sub(group: Any, name: str) -> Any:
    return group.get_command(group.context_class(group), name)


def resolve(line: str) -> list[list[str]]:
    """The command paths a README line names (several where it lists alternatives), checked against the
    real command tree: each subcommand exists, and every ``--option`` it uses belongs to the leaf command."""
    tokens = shlex.split(line.replace("[", " ").replace("]", " "))[1:]
    root = typer.main.get_command(app)
    paths: list[list[str]] = [[]]
    command: Any = root
    i = 0
    while _is_group(command) and i < len(tokens) and not tokens[i].startswith("-"):
        names = _alternatives(tokens[i])
        subs = [_sub(command, n) for n in names]
        assert all(s is not None for s in subs), f"README line {line!r}: {tokens[i]!r} is not a subcommand of " \
                                                 f"{command.name!r}"
        paths = [p + [n] for p in paths for n in names]
        command = subs[0]  # alternatives share the rest of the line: each is checked below
        i += 1
    assert not _is_group(command), f"README line {line!r} stops at the group {command.name!r}"
    for path in paths:
        leaf: Any = root
        for name in path:
            leaf = _sub(leaf, name)
        known = {opt for p in leaf.params for opt in (*p.opts, *p.secondary_opts)}
        passes_through = bool(leaf.context_settings.get("ignore_unknown_options"))  # e.g. config show
        for token in tokens[i:]:
            if re.match(r"--\w|-\w$", token) and not passes_through:  # long and short options
                option = token.split("=", 1)[0]
                assert option in known, f"README line {line!r}: {option} is not an option of `palaestra " \
                                        f"{' '.join(path)}` (it has {sorted(known)})"
    return paths


LINES = command_lines()


def test_readme_shows_commands() -> None:
    """The extraction itself finds the commands README is known to show (so the test below has teeth)."""
    assert any(line.startswith("palaestra eval run --env mcqa") for line in LINES)
    assert any(line.startswith("palaestra env check ./counter.py:Counter") for line in LINES)
    assert len(LINES) >= 15


@pytest.mark.parametrize("line", LINES)
def test_every_palaestra_command_line_parses(line: str) -> None:
    runner = CliRunner()
    for path in resolve(line):
        result = runner.invoke(app, [*path, "--help"])
        assert result.exit_code == 0, f"`palaestra {' '.join(path)} --help`: {result.output}"
        assert "Usage" in result.output


def test_python_blocks_run(tmp_path: Path) -> None:
    assert blocks("python"), "README has no Python block any more"
    for n, body in enumerate(blocks("python")):
        path = tmp_path / f"block{n}.py"
        path.write_text(body, encoding="utf-8")
        proc = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert proc.returncode == 0, f"README Python block {n}:\n{body}\n{proc.stderr[-3000:]}"


def test_counter_example_passes_env_check_as_written(tmp_path: Path) -> None:
    """The Counter block saved as counter.py, then README's own shell lines run in that directory."""
    counter = next(b for b in blocks("python") if "class Counter(Environment)" in b)
    (tmp_path / "counter.py").write_text(counter, encoding="utf-8")
    shell = next(b for b in blocks("bash") if "palaestra env check ./counter.py:Counter" in b)
    env = {**os.environ, "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")}
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", shell], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "oracle scores full reward" in proc.stdout and "FAIL" not in proc.stdout
    # the eval run line ran too: the oracle on the README's task scores full reward
    metrics = list(tmp_path.glob("runs/*/metrics.json"))
    assert len(metrics) == 1, proc.stdout[-2000:]
    overall = json.loads(metrics[0].read_text())["overall"]
    assert overall["mean_reward"] == 1.0 and overall["n_rollouts_scored"] >= 1


def test_env_check_without_tasks_says_where_they_go(tmp_path: Path) -> None:
    """Without --input, a new environment with no data/ folder gets a hint, not a bare '0 tasks'."""
    counter = next(b for b in blocks("python") if "class Counter(Environment)" in b)
    (tmp_path / "counter.py").write_text(counter, encoding="utf-8")
    result = CliRunner().invoke(app, ["env", "check", f"{tmp_path / 'counter.py'}:Counter"], terminal_width=300)
    assert result.exit_code == 1
    assert "data/*.jsonl" in result.output and "--input" in result.output


def test_run_file_example_resolves(tmp_path: Path) -> None:
    (yaml_block,) = blocks("yaml")
    (tmp_path / "run.yaml").write_text(yaml_block, encoding="utf-8")
    result = CliRunner().invoke(app, ["config", "show", "--config", str(tmp_path / "run.yaml")], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "mcqa-cascade" in result.output


def test_environment_table_lists_every_builtin() -> None:
    from palaestra.envs.registry import builtin_names, load_env

    section = README.split("## Built-in environments", 1)[1].split("\n## ", 1)[0]
    rows = {m.group(1): int(m.group(2)) for m in re.finditer(r"^\| `(\w+)` \|[^|]*\|[^|]*\| (\d+) \|", section, re.M)}
    assert sorted(rows) == sorted(builtin_names())
    for name, count in rows.items():
        assert count == len(load_env(name).examples()), f"README says {name} has {count} tasks"


def test_test_command_is_what_ci_runs() -> None:
    """README's test command is exactly `bash .ci/run`; its quick start installs what CI installs."""
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert any(b.strip() == "bash .ci/run" for b in blocks("bash"))
    assert "pytest" in ci and "setup-*.sh" in ci
    # the quick start pins the same CPU torch as CI, and its extra is one CI installs too
    quick = blocks("bash")[0]
    torch_pin = re.search(r"torch==[\d.]+", quick)
    assert torch_pin is not None and torch_pin.group(0) in ci
    quick_extra = re.search(r"-e '\.\[(\w+)\]'", quick)
    ci_extras = re.search(r"-e '\.\[([\w,]+)\]'", ci)
    assert quick_extra is not None and ci_extras is not None
    assert quick_extra.group(1) in ci_extras.group(1).split(",")
    assert "palaestra eval run --env mcqa" in quick


def test_nothing_points_outside_the_repository() -> None:
    """README, CI and the tests use only what a clone has: nothing from a `shared` folder beside the checkout."""
    files = [ROOT / "README.md", *sorted((ROOT / ".ci").iterdir()), *sorted((ROOT / "tests").rglob("*.py"))]
    needle = "../" + "shared"  # split, so this file does not find itself
    offenders = [str(p.relative_to(ROOT)) for p in files if p.is_file() and (
        needle in p.read_text(encoding="utf-8", errors="replace")
        or re.search(r"parents?\[\d\][^\n]*[\"']shared[\"']", p.read_text(encoding="utf-8", errors="replace")))]
    assert offenders == []
