"""Settings you can see: one typed Settings object read at the edge, passed down; the library reads no
environment variable; --sandbox and its variable reach the sandbox that grades; run.json records the
effective settings with their sources; nothing leaks from one run into the next through os.environ."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import palaestra
from palaestra.sandbox.providers import default_provider_name
from palaestra.settings import Settings

SRC = Path(palaestra.__file__).resolve().parent
# The only ways a module other than settings.py may touch os.environ: copying it into the environment of
# a child process it starts (or passing PATH on to one), or setting one for a child's own library code
# (an assignment is not a read).
CHILD_ENV = re.compile(r"dict\(os\.environ\)|\{\*\*os\.environ\b|os\.environ\.items\(\)|os\.environ\.get\(\"PATH\""
                       r"|os\.environ\[[^\]]+\] = ")
READS = re.compile(r"os\.environ|getenv")


def _cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("PALAESTRA_SANDBOX")}
    return subprocess.run([sys.executable, "-m", "palaestra.cli.main", *args], capture_output=True, text=True,
                          env={**base, "COLUMNS": "250", **(env or {})}, timeout=300, cwd=cwd)


def _verdict_sandboxes(run_dir: Path) -> list[str]:
    rows = [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines() if line.strip()]
    assert rows, f"no rollouts in {run_dir}"
    return [r["verdict"]["metadata"]["sandbox"] for r in rows]


def test_library_reads_no_environment_variable() -> None:
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel == "settings.py":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if READS.search(line) and not CHILD_ENV.search(line):
                offenders.append(f"{rel}:{n}: {line.strip()}")
    assert not offenders, "read the variable in palaestra/settings.py and pass it down:\n" + "\n".join(offenders)
    # and the settings module knows every PALAESTRA_* variable the library mentions as one it reads
    known = {Settings.variable_of(f) for f in Settings.model_fields} - {None}
    assert {"PALAESTRA_SANDBOX", "PALAESTRA_CODE_SCORING", "PALAESTRA_JUDGE_MODEL", "PALAESTRA_TOKEN"} <= known


def test_settings_from_a_mapping_name_their_source_and_redact_secrets() -> None:
    s = Settings.from_env({"PALAESTRA_SANDBOX": " Process ", "PALAESTRA_TOKEN": "s3cret-token-value",
                           "PALAESTRA_CODEX_BIN": "/opt/codex", "PALAESTRA_CACHE": ""})
    assert s.sandbox == "process" and s.source("sandbox") == "env PALAESTRA_SANDBOX"
    assert s.cache is None and s.source("cache") == "default"  # empty counts as unset
    assert s.agent_bins == {"PALAESTRA_CODEX_BIN": "/opt/codex"}
    shown = s.effective()
    assert shown["token"] == {"value": "***", "source": "env PALAESTRA_TOKEN"}
    assert "s3cret" not in json.dumps(shown)
    assert Settings.from_env({}).sandbox is None  # a mapping given: the process environment is not consulted


def test_sandbox_flag_reaches_run_json_and_the_grading_sandbox(tmp_path: Path) -> None:
    out = tmp_path / "flag"
    r = _cli("eval", "run", "--env", "code", "--model", "scripted:oracle", "--limit", "2", "--sandbox", "process",
             "-o", str(out), "-q")
    assert r.returncode == 0, r.stderr + r.stdout
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["config"]["sandbox"] == "process"
    assert manifest["settings"]["sandbox"] == {"value": "process", "source": "flag"}
    assert _verdict_sandboxes(out) == ["process", "process"]  # it graded there, not on the default

    # without the flag the machine's default grades, and run.json says which one and why
    out2 = tmp_path / "default"
    r = _cli("eval", "run", "--env", "code", "--model", "scripted:oracle", "--limit", "1", "-o", str(out2), "-q")
    assert r.returncode == 0, r.stderr + r.stdout
    recorded = json.loads((out2 / "run.json").read_text())["settings"]["sandbox"]
    assert recorded == {"value": default_provider_name(), "source": "default (this machine)"}
    assert _verdict_sandboxes(out2) == [default_provider_name()]


def test_the_variable_still_works_and_config_show_names_each_source(tmp_path: Path) -> None:
    out = tmp_path / "var"
    r = _cli("eval", "run", "--env", "code", "--model", "scripted:oracle", "--limit", "1", "-o", str(out), "-q",
             env={"PALAESTRA_SANDBOX": "process"})
    assert r.returncode == 0, r.stderr + r.stdout
    assert json.loads((out / "run.json").read_text())["settings"]["sandbox"] == {
        "value": "process", "source": "env PALAESTRA_SANDBOX"}
    assert _verdict_sandboxes(out) == ["process"]

    def sandbox_row(*args: str, env: dict[str, str]) -> str:
        shown = _cli("config", "show", "--env", "code", *args, env=env)
        assert shown.returncode == 0, shown.stderr + shown.stdout
        rows = [line for line in shown.stdout.splitlines() if re.match(r"^\W*sandbox\W", line)]
        assert len(rows) == 1, shown.stdout
        return rows[0]

    via_env = sandbox_row(env={"PALAESTRA_SANDBOX": "process"})
    assert '"process"' in via_env and "env PALAESTRA_SANDBOX" in via_env
    run_file = tmp_path / "run.yaml"
    run_file.write_text("sandbox: docker\n")
    via_file = sandbox_row("--config", str(run_file), env={"PALAESTRA_SANDBOX": "process"})
    assert '"docker"' in via_file and f"file {run_file}" in via_file  # the run file beats the variable
    via_flag = sandbox_row("--config", str(run_file), "--sandbox", "local", env={"PALAESTRA_SANDBOX": "process"})
    assert '"local"' in via_flag and "flag" in via_flag  # the flag beats both
    machine = _cli("config", "show", "--env", "code", env={"PALAESTRA_SANDBOX_UIDS": "62000-62999"})
    assert re.search(r"sandbox_uids\W+\"62000-62999\"\W+env PALAESTRA_SANDBOX_UIDS", machine.stdout), machine.stdout


LABELLED_ENV = '''
from palaestra.envs.code.env import CodeEnv


class LabelledCode(CodeEnv):
    """`code`, reporting the labels its grading sandbox gets, so a test can see the run id reach it."""

    name = "labelledcode"
    data_dir = CodeEnv.resolved_data_dir()

    def examples(self):
        return [t.model_copy(update={"env": self.name}) for t in super().examples()]

    async def verify(self, state, trajectory):
        verdict = await super().verify(state, trajectory)
        verdict.metadata["labels"] = self._spec(state.task, {}, "grade").labels
        return verdict
'''


@pytest.mark.parametrize("second_placement", ["direct", "local"])
def test_two_evaluations_in_one_process_keep_their_own_run_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              second_placement: str) -> None:
    monkeypatch.delenv("PALAESTRA_RUN_ID", raising=False)
    (tmp_path / "labelled.py").write_text(LABELLED_ENV)
    monkeypatch.chdir(tmp_path)  # a local-process placement imports the file from the working directory
    seen = {}
    for i, placement in enumerate(["direct", second_placement]):
        result = palaestra.evaluate(env="./labelled.py:LabelledCode", model="scripted:oracle", limit=1,
                                    out=tmp_path / f"run{i}", placement=placement, sandbox="process",
                                    settings=Settings.from_env({}))
        run_dir = Path(result.run_dir)
        manifest = json.loads((run_dir / "run.json").read_text())
        rows = [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines() if line]
        assert [r["outcome"]["status"] for r in rows] == ["scored"], rows
        labels = rows[0]["verdict"]["metadata"]["labels"]
        assert labels["run_id"] == manifest["run_id"], (labels, manifest["run_id"])
        assert rows[0]["verdict"]["metadata"]["sandbox"] == "process"
        assert "PALAESTRA_RUN_ID" not in os.environ  # nothing is written into the process environment
        seen[i] = manifest["run_id"]
    assert seen[0] != seen[1]
