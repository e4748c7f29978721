"""``terminal``: the agent acts in one sandbox, grading runs the task's tests in a fresh one with only
the agent's working directory copied in, so tampering with the tests (or /tmp) changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from palaestra.core.errors import ToolError
from palaestra.core.grading import GradingFailure
from palaestra.core.records import Task, Trajectory
from palaestra.envs.terminal.env import Terminal
from palaestra.envs.terminal.taskdir import load_task_dir


def make_taskdir(root: Path, test: str, workspace: dict[str, str] | None = None,
                 extra: dict[str, str] | None = None) -> Path:
    (root / "tests").mkdir(parents=True)
    (root / "instruction.md").write_text("Create done.txt containing 'yes'.\n")
    (root / "tests" / "test.sh").write_text(test)
    for rel, text in (workspace or {}).items():
        p = root / "workspace" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    for rel, text in (extra or {}).items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


DONE_TEST = "#!/bin/sh\n[ \"$(cat done.txt)\" = yes ]\n"


Calls = list[tuple[str, dict[str, object]]]


async def solve(env: Terminal, task: Task, calls: Calls) -> tuple[float, dict[str, object]]:
    state = await env.seed(task)
    try:
        for name, args in calls:
            await env.call_tool(state, name, args)
        v = await env.verify(state, Trajectory())
    finally:
        await env.close(state)
    return v.reward, v.metadata


async def test_tampering_with_tests_changes_nothing(tmp_path: Path) -> None:
    env = Terminal()
    task = Task(id="t", env="terminal", metadata={"task_dir": str(make_taskdir(tmp_path / "t", DONE_TEST))})
    cheats: Calls = [
        ("write_file", {"path": "tests/test.sh", "content": "exit 0\n"}),
        ("run", {"cmd": "mkdir -p /tmp/palaestra-tests && printf 'exit 0\\n' > /tmp/palaestra-tests/test.sh"}),
        ("run", {"cmd": "mkdir -p /tmp/palaestra-logs && echo 1 > /tmp/palaestra-logs/reward.txt"}),
        ("run", {"cmd": "nohup sh -c 'sleep 2; echo yes > done.txt' >/dev/null 2>&1 &"}),
    ]
    reward, meta = await solve(env, task, cheats)
    assert reward == 0.0, meta
    reward, meta = await solve(env, task, [("run", {"cmd": "echo yes > done.txt"})])
    assert reward == 1.0, meta


async def test_grading_copy_keeps_modes_dirs_and_links(tmp_path: Path) -> None:
    test = "#!/bin/sh\nset -e\n[ -x bin/tool ]\n[ -d empty/dir ]\n[ -L link ]\n[ \"$(./bin/tool)\" = hi ]\n"
    env = Terminal()
    task = Task(id="t", env="terminal", metadata={"task_dir": str(make_taskdir(tmp_path / "t", test))})
    calls: list[tuple[str, dict[str, object]]] = [
        ("write_file", {"path": "bin/tool", "content": "#!/bin/sh\necho hi\n"}),
        ("run", {"cmd": "chmod +x bin/tool && mkdir -p empty/dir && ln -s /etc/passwd link"}),
    ]
    reward, meta = await solve(env, task, calls)
    assert reward == 1.0, meta


async def test_reward_file_and_timeouts(tmp_path: Path) -> None:
    test = "#!/bin/sh\necho 0.25 > \"$PALAESTRA_REWARD_FILE\"\nexit 1\n"
    env = Terminal()
    task = Task(id="t", env="terminal", metadata={"task_dir": str(make_taskdir(tmp_path / "t", test))})
    reward, meta = await solve(env, task, [])
    assert reward == 0.25 and meta["reward_file"] == "0.25"

    toml = "[verifier]\ntimeout_sec = 1\n"
    slow = make_taskdir(tmp_path / "slow", "#!/bin/sh\necho started >&2\nsleep 30\n", extra={"task.toml": toml})
    task = Task(id="slow", env="terminal", metadata={"task_dir": str(slow)})
    with pytest.raises(GradingFailure) as info:  # a test that never finished graded nothing: not a 0
        await solve(env, task, [])
    assert info.value.failure == "verifier" and info.value.reason == "timeout"
    assert "after 1 s" in info.value.message and "started" in info.value.message


async def test_tools(tmp_path: Path) -> None:
    env = Terminal()
    root = make_taskdir(tmp_path / "t", DONE_TEST, workspace={"notes/a.txt": "alpha\n"})
    state = await env.seed(Task(id="t", env="terminal", metadata={"task_dir": str(root)}))
    box = state.box
    try:
        assert await env.read_file(state, "notes/a.txt") == "alpha\n"
        assert "wrote 3 bytes" in await env.write_file(state, "b.txt", "bee")
        out = await env.run(state, "cat b.txt; ls notes; exit 4")
        assert "exit code 4" in out and "bee" in out and "a.txt" in out
        assert "timeout" in await env.run(state, "sleep 10", timeout_s=0.3)
        for bad in ("../../etc/passwd", "/etc/passwd"):
            with pytest.raises(ToolError):
                await env.read_file(state, bad)
            with pytest.raises(ToolError):
                await env.write_file(state, bad, "x")
        with pytest.raises(ToolError):
            await env.read_file(state, "missing.txt")
    finally:
        await env.close(state)
    assert (await box.status()).state == "closed"


def test_harbor_layout_with_solve_sh(tmp_path: Path) -> None:
    root = make_taskdir(tmp_path / "h", DONE_TEST, extra={"environment/Dockerfile": "FROM scratch\n",
                                                          "environment/data.txt": "d\n",
                                                          "solution/solve.sh": "echo yes > done.txt\n",
                                                          "task.toml": "[agent]\ntimeout_sec = 42\n"})
    td = load_task_dir(root)
    assert td.workspace == {"data.txt": b"d\n"} and td.agent_timeout_s == 42
    assert td.reference == {"tool_calls": [{"name": "run", "arguments": {"cmd": "echo yes > done.txt\n"}}],
                            "final_answer": "Done."}


def test_bundled_tasks() -> None:
    env = Terminal()
    tasks = env.examples()
    assert len(tasks) >= 20
    for task in tasks:
        env.check_task(task)
        ref = env.reference(task)
        assert ref is not None and ref.tool_calls
        assert task.input and "task_dir" in task.metadata
    ref_file = env.resolved_data_dir() / "tasks" / "hello-file" / "solution" / "reference.json"
    assert json.loads(ref_file.read_text())["tool_calls"]


async def test_sandbox_failure_is_infrastructure_not_zero(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from palaestra.core.errors import InfraError
    from palaestra.sandbox import SandboxError

    class Broken:
        async def create(self, spec: object) -> object:
            raise SandboxError("no sandbox today")

    monkeypatch.setattr("palaestra.envs.terminal.env.provider_for", lambda task=None, default=None: Broken())
    task = Task(id="t", env="terminal", metadata={"task_dir": str(make_taskdir(tmp_path / "t", DONE_TEST))})
    with pytest.raises(InfraError) as info:
        await Terminal().seed(task)
    assert info.value.failure == "sandbox"


def test_network_needs_are_read_from_task_toml() -> None:
    from palaestra.envs.terminal.taskdir import network_needs

    assert network_needs({}) == {}
    assert network_needs({"environment": {"allow_internet": False}}) == {}
    assert set(network_needs({"environment": {"allow_internet": True}})) == {"agent", "verifier"}
    both = network_needs({"environment": {"network_mode": "public"}, "verifier": {"network_mode": "no-network"}})
    assert both == {"agent": '[environment] network_mode = "public"'}
    only = network_needs({"environment": {"network_mode": "no-network"}, "verifier": {"network_mode": "allowlist"}})
    assert only == {"verifier": '[verifier] network_mode = "allowlist"'}


async def test_a_harbor_directory_named_directly_uses_harbor_paths_and_its_reward_file(tmp_path: Path) -> None:
    """No importer, no metadata.harbor: a test that writes /logs/verifier/reward.txt is still read there,
    and one that means to write it but does not is failed(verifier), not a 0."""
    writes = ('#!/bin/bash\nif [ "$(cat done.txt 2>/dev/null)" = yes ]; then echo 1 > /logs/verifier/reward.txt; '
              'else echo 0 > /logs/verifier/reward.txt; fi\n')
    env = Terminal()
    task = Task(id="h", env="terminal", metadata={"task_dir": str(make_taskdir(tmp_path / "h", writes))})
    assert (await solve(env, task, [("run", {"cmd": "echo yes > done.txt"})]))[0] == 1.0
    reward, meta = await solve(env, task, [])
    assert reward == 0.0 and meta["reward_file"] == "0"
    forgets = '#!/bin/bash\n[ "$(cat done.txt)" = yes ] && echo 1 > /logs/verifier/reward.txt\nexit 0\n'
    task = Task(id="f", env="terminal", metadata={"task_dir": str(make_taskdir(tmp_path / "f", forgets))})
    with pytest.raises(GradingFailure) as info:
        await solve(env, task, [])
    assert info.value.failure == "verifier" and info.value.reason == "reward_missing"
    assert "done.txt: No such file or directory" in info.value.message  # the tail of the test's stderr
