"""Harbor and Terminal-Bench 1 tasks run as their authors meant them, with a real docker engine (a dockerd
the tests start, no registry): the image built from the task's Dockerfile (cached by content hash, a
missing base replaced by the local one and recorded), the agent and then the tests in one container, the
oracle gate of ``bench/harbor_oracle.py`` at small size. Without an engine: approximate or refused."""

from __future__ import annotations

import asyncio
import importlib.util
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from palaestra.adapters.harbor import HARBOR_ENV, import_harbor
from palaestra.adapters.harbor_env import HarborEnvironment
from palaestra.adapters.terminal_bench import import_terminal_bench
from palaestra.core.errors import ToolError
from palaestra.core.grading import GradingFailure
from palaestra.core.records import Trajectory
from palaestra.sandbox.images import ImageBuilder, needed_host

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
sys.path.insert(0, str(ROOT / "tests" / "sandbox"))

from sandbox_rootfs import Daemon, ensure_image  # noqa: E402


@pytest.fixture(scope="module")
def base_image() -> Iterator[str]:
    """The local base image (a root file system built from this machine's files, ``docker import``ed):
    it stands in for every FROM image, since none can be pulled here."""
    daemon = Daemon()
    if not daemon.start():
        pytest.skip(f"docker: no engine can start here ({daemon.reason})")
    try:
        image = ensure_image()
    except Exception as exc:
        daemon.stop()
        pytest.skip(f"docker: the local base image could not be imported ({exc})")
    yield image
    daemon.stop()


@pytest.fixture(params=["docker", "podman"])
def engine_base(request: pytest.FixtureRequest) -> tuple[str, str]:
    """(engine, local base image) for each engine this machine has; podman gets the same root file
    system imported into its own store."""
    if request.param == "docker":
        return "docker", request.getfixturevalue("base_image")
    from palaestra.sandbox import available_providers

    ok, why = available_providers()["podman"]
    if not ok:
        pytest.skip(f"podman: {why}")
    from sandbox_rootfs import IMAGE, build_tar

    if subprocess.run(["podman", "image", "inspect", IMAGE], capture_output=True).returncode != 0:
        imported = subprocess.run(["podman", "import", "-", IMAGE], input=build_tar(), capture_output=True,
                                  timeout=300)
        assert imported.returncode == 0, imported.stderr.decode(errors="replace")
    return "podman", IMAGE


def _gate_module() -> Any:
    spec = importlib.util.spec_from_file_location("harbor_oracle", ROOT / "bench" / "harbor_oracle.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["harbor_oracle"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_oracle_gate_passes(engine_base: tuple[str, str]) -> None:
    engine, base_image = engine_base
    gate = _gate_module()
    result = asyncio.run(gate.gate([FIXTURES / "harbor", FIXTURES / "tb1"], sandbox=engine,
                                   base_image=base_image, build_network="none"))
    rows = {r["task"]: r for r in result["rows"]}
    assert result["passed"], gate.table(result)
    assert result["engine"] == engine and result["needs_met"] == 2 and result["oracle_full"] == 2
    for task in ("harbor-sum-csv", "tb1-hello-file"):  # oracle 1, null 0, on a substituted base, recorded
        assert rows[task]["oracle"]["reward"] == 1.0 and rows[task]["null"]["reward"] == 0.0, rows[task]
        assert rows[task]["oracle"]["base_substituted"][0]["used"] == base_image
    assert rows["harbor-sum-csv"]["oracle"]["base_substituted"][0]["wanted"] == "python:3.12-slim"
    # the tasks whose needs cannot be met here are typed failures with their reason, never 0
    assert rows["harbor-build-fails"]["oracle"]["failure"] == "environment: image_build"
    assert rows["harbor-needs-net"]["oracle"]["failure"] == "environment: needs_network: files.example.invalid"
    assert rows["tb1-fix-add"]["oracle"]["failure"].startswith("environment: "), rows["tb1-fix-add"]
    assert "| harbor-sum-csv | 1 | 0 | python:3.12-slim → " in gate.table(result)


async def test_images_are_cached_by_content_and_failures_carry_the_log(base_image: str, tmp_path: Path) -> None:
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "data.txt").write_text(f"one {tmp_path}\n")  # this run's own content: not built before
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM debian:bookworm-slim\nWORKDIR /srv\nCOPY data.txt /srv/\nUSER 65534\n")
    builder = ImageBuilder(["docker"], default_base=base_image, network="none")
    first = await builder.build(ctx, dockerfile)
    again = await builder.build(ctx, dockerfile)
    assert not first.cached and again.tag == first.tag and again.cached
    assert first.workdir == "/srv" and first.user == "65534"
    assert first.describe()["base_substituted"] == [{"wanted": "debian:bookworm-slim", "used": base_image}]
    (ctx / "data.txt").write_text(f"two {tmp_path}\n")  # another context: another image
    changed = await builder.build(ctx, dockerfile)
    await asyncio.to_thread(subprocess.run, ["docker", "rmi", first.tag, changed.tag], capture_output=True,
                            timeout=60)  # this run's own images: nothing else will use them
    assert changed.tag != first.tag and not changed.cached

    dockerfile.write_text("FROM debian:bookworm-slim\nRUN echo step-output-marker && exit 7\n")
    with pytest.raises(GradingFailure) as failed:
        await builder.build(ctx, dockerfile)
    assert failed.value.kind == "environment" and failed.value.reason == "image_build"
    assert "step-output-marker" in failed.value.output_tail
    with pytest.raises(GradingFailure) as missing:  # no substitute named: refused, naming the image
        await ImageBuilder("docker", network="none").build(ctx, dockerfile)
    assert missing.value.reason == "base_image_missing" and "debian:bookworm-slim" in str(missing.value)


def _task(root: Path, test: str, toml: str = "") -> Path:
    (root / "environment").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "instruction.md").write_text("Leave a note.\n")
    (root / "task.toml").write_text(toml or "[verifier]\ntimeout_sec = 60.0\n[agent]\ntimeout_sec = 60.0\n")
    (root / "environment" / "Dockerfile").write_text("FROM ubuntu:24.04\nWORKDIR /work\n")
    (root / "tests" / "test.sh").write_text(test)
    return root


async def test_tests_arrive_after_the_agent_and_run_in_its_container(base_image: str, tmp_path: Path) -> None:
    test = ('#!/bin/bash\nif [ "$(cat /var/tmp/note)" = "$(cat /tests/expected)" ]; then\n'
            '  echo \'{"reward": 0.5, "style": 1}\' > /logs/verifier/reward.json\nelse\n'
            '  echo \'{"reward": 0}\' > /logs/verifier/reward.json\nfi\n')
    root = _task(tmp_path / "note", test)
    (root / "tests" / "expected").write_text("hello\n")
    [task] = import_harbor(root).tasks
    env = HarborEnvironment("docker", base_image=base_image, build_network="none")
    state = await env.seed(task)
    try:
        cmd = "pwd; ls /tests 2>&1; mkdir -p /var/tmp && echo hello > /var/tmp/note"
        seen = await env.call_tool(state, "run", {"cmd": cmd})
        assert "/work" in seen and "No such file" in seen  # the agent never sees the tests
        verdict = await env.verify(state, Trajectory())  # outside the working directory, and still there
    finally:
        await env.close(state)
    assert verdict.reward == 0.5 and verdict.components["style"] == 1.0, verdict
    assert verdict.metadata["image"]["engine"] == "docker"


async def test_a_server_the_agent_leaves_running_is_there_for_the_tests(base_image: str, tmp_path: Path) -> None:
    """Harbor's agent types into tmux, so what it starts in the background (a web server, a daemon) is still
    running when the tests probe it; a Palaestra exec that killed it would score a right solution 0."""
    test = ('#!/bin/bash\nif kill -0 "$(cat /var/tmp/server.pid)" 2>/dev/null; then\n'
            '  echo 1 > /logs/verifier/reward.txt\nelse\n  echo 0 > /logs/verifier/reward.txt\nfi\n')
    [task] = import_harbor(_task(tmp_path / "server", test)).tasks
    env = HarborEnvironment("docker", base_image=base_image, build_network="none")
    state = await env.seed(task)
    try:
        cmd = "mkdir -p /var/tmp; sleep 600 & echo $! > /var/tmp/server.pid"
        started = await env.call_tool(state, "run", {"cmd": cmd})
        assert "killed" not in started, started
        verdict = await env.verify(state, Trajectory())
    finally:
        await env.close(state)
    assert verdict.reward == 1.0, verdict


async def test_a_test_that_needs_a_host_is_needs_network(base_image: str, tmp_path: Path) -> None:
    test = ("#!/bin/bash\nwget -q -O /tmp/uv.sh http://astral.example.invalid/uv/install.sh && sh /tmp/uv.sh\n"
            "uvx pytest /tests && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n")
    [task] = import_harbor(_task(tmp_path / "uv", test)).tasks
    env = HarborEnvironment("docker", base_image=base_image, build_network="none")
    state = await env.seed(task)
    try:
        with pytest.raises(GradingFailure) as failed:
            await env.verify(state, Trajectory())
    finally:
        await env.close(state)
    assert failed.value.kind == "environment" and failed.value.reason == "needs_network: astral.example.invalid"


def test_tb1_template_style_logs_name_their_host() -> None:
    """The shapes the build and test tools print when a host is unreachable, each naming the host."""
    assert needed_host("curl: (6) Could not resolve host: astral.sh") == "astral.sh"
    assert needed_host("Err:1 http://deb.debian.org/debian bookworm InRelease\n  Temporary failure resolving "
                       "'deb.debian.org'") == "deb.debian.org"
    assert needed_host("ERROR: ... Failed to resolve 'pypi.org' ([Errno -3] Temporary failure in name "
                       "resolution)") == "pypi.org"
    assert needed_host("npm error getaddrinfo ENOTFOUND registry.npmjs.org") == "registry.npmjs.org"
    assert needed_host("AssertionError: 2 != 3") is None


async def test_without_an_engine_runs_are_approximate_or_refused(tmp_path: Path) -> None:
    """No docker or podman (here: the local sandbox asked for): the verdict says ``approximate``; with
    ``require_engine`` the run is refused before anything starts."""
    from palaestra.sandbox.providers import provider_class

    # availability() itself, not available_providers(), which turns an exception into "unusable": a bug
    # there must fail this test, not skip it
    why = {n: provider_class(n).availability() for n in ("local", "process")}
    name = next((n for n, (ok, _) in why.items() if ok), None)
    if name is None:
        pytest.skip("bwrap: neither the local nor the process sandbox works here: "
                    + "; ".join(f"{n}: {reason}" for n, (_, reason) in why.items()))
    work = tmp_path / "hello"
    shutil.copytree(FIXTURES / "tb1" / "hello-file", work)
    [task] = import_terminal_bench(work, tmp_path / "tasks").tasks
    env = HarborEnvironment(name)
    assert env.engine is None and env.preflight([task]) == {"engine": None, "approximate": True}
    state = await env.seed(task)
    try:
        ref = env.reference(task)
        assert ref is not None
        for call in ref.tool_calls:
            await env.call_tool(state, call.name, call.arguments)
        verdict = await env.verify(state, Trajectory())
    finally:
        await env.close(state)
    assert verdict.reward == 1.0 and verdict.metadata["approximate"]["reason"] == "no_container_engine"
    with pytest.raises(GradingFailure) as refused:
        HarborEnvironment(name, require_engine=True).preflight([task])
    assert refused.value.reason == "no_container_engine"


async def test_the_agent_shares_the_task_toml_time_budget(base_image: str, tmp_path: Path) -> None:
    """``[agent] timeout_sec`` bounds all the agent's commands together: a command is cut at what is left,
    and after that the tool answers that the time is used up (the verifier still runs)."""
    toml = "[verifier]\ntimeout_sec = 60.0\n[agent]\ntimeout_sec = 1.0\n"
    [task] = import_harbor(_task(tmp_path / "slow", "#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n", toml)).tasks
    env = HarborEnvironment("docker", base_image=base_image, build_network="none")
    state = await env.seed(task)
    try:
        first = await env.call_tool(state, "run", {"cmd": "sleep 30", "timeout_s": 30})
        assert "timeout" in first, first
        with pytest.raises(ToolError, match="agent time"):
            await env.call_tool(state, "run", {"cmd": "true"})
        assert (await env.verify(state, Trajectory())).reward == 0.0
    finally:
        await env.close(state)


def test_env_import_then_eval_run_builds_and_scores(base_image: str, tmp_path: Path) -> None:
    """The CLI path: `env import harbor --base-image` rows for the ``harbor`` environment; `eval run`
    (the real collector) scores the TB1 task's oracle 1 and its null 0 in a built image, and the task
    whose Dockerfile cannot be built here is failed(environment), not 0; metrics count the substitution."""
    rows = tmp_path / "rows.jsonl"
    cli = [sys.executable, "-m", "palaestra.cli.main"]
    proc = subprocess.run([*cli, "env", "import", "harbor", str(FIXTURES / "tb1"), "--out", str(rows),
                           "--base-image", base_image], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for model, expected in (("scripted:oracle", 1.0), ("scripted:null", 0.0)):
        out = tmp_path / model.split(":")[1]
        run = subprocess.run([*cli, "eval", "run", "-i", str(rows), "--model", model, "--max-attempts", "1",
                              "--min-coverage", "0", "--out", str(out), "-q"], capture_output=True, text=True,
                             timeout=600)
        assert run.returncode == 0, run.stdout + run.stderr
        records = {r["task_id"]: r for r in map(orjson.loads, (out / "rollouts.jsonl").read_bytes().splitlines())}
        hello, fix = records["tb1-hello-file"], records["tb1-fix-add"]
        assert hello["outcome"]["status"] == "scored" and hello["verdict"]["reward"] == expected, hello
        assert hello["verdict"]["metadata"]["image"]["base_substituted"][0]["used"] == base_image
        assert fix["outcome"]["status"] == "failed" and fix["outcome"]["kind"] == "environment", fix["outcome"]
        metrics = orjson.loads((out / "metrics.json").read_bytes())
        harbor = metrics["env_metrics"][HARBOR_ENV]  # the one scored rollout was built on the local base
        assert harbor["base_substituted"] == 1 and harbor["approximate"] == 0, metrics["env_metrics"]


async def test_a_task_that_needs_compose_services_is_failed_environment(tmp_path: Path) -> None:
    """A TB1 task whose docker-compose.yaml starts a database beside ``client``: not run here, so the
    rollout is failed(environment) naming the service, before anything starts (engine or not)."""
    work = tmp_path / "with-db"
    shutil.copytree(FIXTURES / "tb1" / "hello-file", work)
    compose = (work / "docker-compose.yaml").read_text()
    (work / "docker-compose.yaml").write_text(compose + "  db:\n    image: postgres:16\n")
    [task] = import_terminal_bench(work, tmp_path / "tasks").tasks
    with pytest.raises(GradingFailure) as failed:
        await HarborEnvironment("local").seed(task)
    assert failed.value.kind == "environment" and failed.value.reason == "compose_services: db"


def test_env_check_passes_on_an_imported_task(base_image: str, tmp_path: Path) -> None:
    """`env check` on harbor rows: oracle full, null zero, and its grading probes (built on the task's
    own image) come back typed."""
    rows = tmp_path / "rows.jsonl"
    cli = [sys.executable, "-m", "palaestra.cli.main"]
    made = subprocess.run([*cli, "env", "import", "harbor", str(FIXTURES / "harbor" / "sum-csv"), "--out", str(rows),
                           "--base-image", base_image], capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stdout + made.stderr
    check = subprocess.run([*cli, "env", "check", "palaestra.adapters.harbor_env:HarborEnvironment", "-i", str(rows),
                            "--sandbox", "docker"], capture_output=True, text=True, timeout=600)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "1/1 full" in check.stdout and "1/1 zero" in check.stdout and "failed(verifier)" in check.stdout


async def test_a_task_naming_a_prebuilt_image_runs_it_as_it_is(base_image: str, tmp_path: Path) -> None:
    """``[environment] docker_image`` in task.toml: that image is run without a build; one that is not on
    the machine is failed(environment), reason ``image_missing``."""
    test = '#!/bin/bash\n[ -f /tmp/made ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n'
    toml = f'[environment]\ndocker_image = "{base_image}"\n[verifier]\ntimeout_sec = 60.0\n'
    [task] = import_harbor(_task(tmp_path / "prebuilt", test, toml)).tasks
    env = HarborEnvironment("docker", build_network="none")
    state = await env.seed(task)
    try:
        await env.call_tool(state, "run", {"cmd": "touch /tmp/made"})
        verdict = await env.verify(state, Trajectory())
    finally:
        await env.close(state)
    assert verdict.reward == 1.0 and verdict.metadata["image"]["tag"] == base_image
    missing = task.model_copy(update={"metadata": {**task.metadata, "image": "palaestra-no-such-image:1"}})
    with pytest.raises(GradingFailure) as failed:
        await HarborEnvironment("docker").seed(missing)
    assert failed.value.reason == "image_missing" and "palaestra-no-such-image:1" in str(failed.value)
