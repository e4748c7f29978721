"""What a small run imports: an evaluation whose environment and model live in this process (the scripted
model, an in-process placement) loads neither aiohttp (~0.1 s, most of it building its default TLS
contexts) nor numpy (~0.1 s; only the bootstrap of more than one task needs it). Together they were
about 40 % of `eval run` on one row. A run that talks HTTP, or bootstraps several tasks, still gets them
(checked too, so the test cannot pass by never running)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import json, sys
from palaestra import evaluate
result = evaluate(env="mcqa", model="scripted:oracle", limit=int(sys.argv[2]), out=sys.argv[1])
print(json.dumps({"mean": result.metrics["overall"]["mean_reward"], "ci": result.metrics["overall"]["reward_ci95"],
                  "numpy": "numpy" in sys.modules, "aiohttp": "aiohttp" in sys.modules}))
"""


def _run(tmp_path: Path, limit: int) -> dict[str, object]:
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / f"run-{limit}"), str(limit)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_a_one_task_in_process_run_imports_neither_aiohttp_nor_numpy(tmp_path: Path) -> None:
    one = _run(tmp_path, 1)
    assert one["mean"] == 1.0 and one["ci"] == [1.0, 1.0]  # one task: every resample is that task
    assert one["numpy"] is False and one["aiohttp"] is False
    several = _run(tmp_path, 3)
    assert several["mean"] == 1.0 and several["numpy"] is True  # the bootstrap of three tasks drew with numpy


CLI_SCRIPT = """
import json, sys
from palaestra.cli.main import app
loaded = {"import": "pydantic" in sys.modules}
for args in (["--version"], ["--help"]):
    try:
        app(args)
    except SystemExit:
        pass
    loaded[" ".join(args)] = "pydantic" in sys.modules
import palaestra
task = palaestra.Task(id="t", env="mcqa")  # the records still load on first use, from both packages
from palaestra.core import Rollout
print(json.dumps({**loaded, "task": task.id, "rollout": Rollout.__name__, "after": "pydantic" in sys.modules}))
"""


def test_the_command_line_starts_without_pydantic() -> None:
    """pydantic and the record models were ~60 % of importing the CLI (0.19 s): `palaestra --help` and
    `--version` never need them, so `palaestra` and `palaestra.core` import their names on first use."""
    proc = subprocess.run([sys.executable, "-c", CLI_SCRIPT], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen == {"import": False, "--version": False, "--help": False, "task": "t", "rollout": "Rollout",
                    "after": True}


def test_every_name_palaestra_core_exports_resolves() -> None:
    """``palaestra.core`` names its exports three times (the type checker's imports, ``__all__`` and the
    lazy table): the last two must agree, and each name must come from the module the table says."""
    import palaestra
    import palaestra.core as core

    assert sorted(core.__all__) == sorted(core._MODULE_OF)
    for name in core.__all__:
        assert getattr(core, name) is getattr(__import__(f"palaestra.core.{core._MODULE_OF[name]}",
                                                         fromlist=[name]), name)
    assert all(getattr(palaestra, name) is getattr(core, name) for name in palaestra._CORE)
