"""The grading contract as a pure function: what a test script's run (exit code, output, reward files)
becomes — a Verdict, or a typed GradingFailure. The log lines are those real shells and tools print;
tests/adapters/test_harbor_grading.py runs the same shapes in real sandboxes."""

from __future__ import annotations

import math
from typing import Any

import pytest

from palaestra.core.errors import InfraError, VerifierError
from palaestra.core.grading import (
    GradingFailure,
    RewardFile,
    TestRun,
    check_verdict,
    grade_test_run,
    missing_programs,
    require_network,
    verifier_exception,
)
from palaestra.core.records import Task, Verdict

WORKDIR = ("/sandbox/app",)


def run(exit_code: int = 0, stderr: str = "", stdout: str = "", **kw: Any) -> TestRun:
    return TestRun(exit_code=exit_code, stdout=stdout, stderr=stderr, agent_paths=WORKDIR, **kw)


def failure(r: TestRun, **kw: bool) -> GradingFailure:
    with pytest.raises(GradingFailure) as info:
        grade_test_run(r, **kw)
    assert isinstance(info.value, InfraError)
    return info.value


def test_real_verdicts_stay_verdicts() -> None:
    assert grade_test_run(run(0)).reward == 1.0
    wrong = grade_test_run(run(1, "cat: out.txt: No such file or directory\n"))
    assert wrong.reward == 0.0 and wrong.passed is False and wrong.metadata["exit_code"] == 1
    # the agent's own program missing, not executable, or its module absent: a wrong answer, not a failure
    for stderr, code in (("/t/test.sh: line 2: ./run.sh: No such file or directory\n", 127),
                         ("sh: 1: ./tools/run.sh: Permission denied\n", 126),
                         ("/t/test.sh: 3: ./hello: not found\n", 127),
                         ("./run.sh: line 2: jq: command not found\n", 127),
                         ("/sandbox/app/bin/tool: line 1: frob: command not found\n", 127),
                         ("timeout: failed to run command './prog': No such file or directory\n", 127),
                         ("ModuleNotFoundError: No module named 'solution'\n", 1)):
        assert grade_test_run(run(code, stderr)).reward == 0.0, stderr
    partial = grade_test_run(run(1, reward_files=[RewardFile("reward.txt", "0.25\n")]))
    assert partial.reward == 0.25 and partial.components["tests"] == 0.25 and partial.metadata["reward_file"] == "0.25"
    # a probe for a tool that is absent, in a test that passes, is no failure
    assert grade_test_run(run(0, "/t/test.sh: line 1: uv: command not found\n")).reward == 1.0


@pytest.mark.parametrize("stderr", [
    "/tmp/palaestra-tests/test.sh: line 3: pytest: command not found\n",
    "/tmp/palaestra-tests/test.sh: 3: pytest: not found\n",
    "sh: 1: exec: pytest: not found\n",
    "bash: pytest: command not found\n",
    "zsh: command not found: pytest\n",
    "/usr/bin/env: 'python3': No such file or directory\n",
    "/usr/bin/env: \u2018python3\u2019: No such file or directory\n",
    "/usr/bin/python3: No module named pytest\n",
    "timeout: failed to run command \u2018pytest\u2019: No such file or directory\n",
    "bash: /tmp/palaestra-tests/run.py: /usr/bin/python9: bad interpreter: No such file or directory\n",
])
def test_a_missing_runner_is_failed_environment(stderr: str) -> None:
    for code in (127, 1):
        f = failure(run(code, stderr))
        assert f.failure == "environment" and f.reason == "runner_missing" and stderr.strip() in f.message
    # Harbor's usual test.sh records pytest's exit status as a reward of 0 and exits 0: still no verdict
    f = failure(run(0, stderr, reward_files=[RewardFile("reward.txt", "0\n")]))
    assert f.failure == "environment"


def test_exit_127_without_a_message_is_a_failure_and_names_its_code() -> None:
    f = failure(run(127))
    assert f.reason == "runner_missing" and "exit 127" in f.message
    assert failure(run(126, "boom\n")).failure == "environment"


def test_reward_files() -> None:
    assert grade_test_run(run(1, reward_files=[RewardFile("reward.txt", "1")])).reward == 1.0
    files = [RewardFile("reward.txt"), RewardFile("reward.json", '{"reward": 0.5, "style": 1}')]
    v = grade_test_run(run(0, reward_files=files), reward_required=True)
    assert v.reward == 0.5 and v.components == {"reward": 0.5, "style": 1.0, "tests": 0.5}
    assert grade_test_run(run(0, reward_files=[RewardFile("reward.txt", "7")])).reward == 1.0  # clamped

    missing = failure(run(0, "done\n", reward_files=[RewardFile("reward.txt"), RewardFile("reward.json")]),
                      reward_required=True)
    assert missing.failure == "verifier" and missing.reason == "reward_missing"
    assert "reward.txt or reward.json" in missing.message and "done" in missing.message
    # without the requirement, the exit code is the verdict
    assert grade_test_run(run(1, reward_files=[RewardFile("reward.txt")])).reward == 0.0

    for name, text in (("reward.txt", "PASSED"), ("reward.txt", ""), ("reward.txt", "nan"),
                       ("reward.json", "{not json"), ("reward.json", '{"score": "high"}'),
                       ("reward.json", '{"a": 1, "b": 0}'), ("reward.json", "true")):
        f = failure(run(0, reward_files=[RewardFile(name, text)]))
        assert f.failure == "verifier" and f.reason == "reward_unparsable", (name, text)
    f = failure(run(0, reward_files=[RewardFile("reward.txt", error="'reward.txt' is a symlink")]))
    assert f.reason == "reward_unreadable"


def test_network_sandbox_timeout_and_limits() -> None:
    curl = "curl: (6) Could not resolve host: astral.sh\n"
    f = failure(run(0, curl, reward_files=[RewardFile("reward.txt", "0")]))
    assert f.failure == "environment" and f.reason == "network" and "astral.sh" in f.message
    assert failure(run(1, stdout="E   urllib3.exceptions.NewConnectionError: Failed to establish a new connection"
                                 ": [Errno 101] Network is unreachable\n")).reason == "network"
    assert grade_test_run(run(0, curl)).reward == 1.0  # the test passed anyway: a verdict
    # a server the agent should have started is not there: the agent's answer, not the network's
    refused = "curl: (7) Failed to connect to 127.0.0.1 port 8080: Connection refused\n"
    assert grade_test_run(run(7, refused)).reward == 0.0

    for stderr in ("sh: 1: cannot create /dev/null: Permission denied\n",
                   "/t/test.sh: line 2: /dev/null: Permission denied\n",
                   "bash: fork: retry: Resource temporarily unavailable\n"):
        for code in (0, 1):  # even a pass: a failed redirect can make a test pass that should not
            f = failure(run(code, stderr))
            assert f.failure == "sandbox" and f.reason == "sandbox_broken", stderr

    f = failure(run(124, "slow\n", failure="timeout", timeout_s=2.0))
    assert f.failure == "verifier" and f.reason == "timeout" and "after 2 s" in f.message and "slow" in f.message
    assert failure(run(137, failure="oom", detail="memory limit 64 MB")).reason == "limit"
    f = failure(run(-1, failure="provider", detail="bwrap died"))
    assert f.failure == "sandbox" and "bwrap died" in f.message


def test_the_output_tail_is_bounded_and_the_end() -> None:
    f = failure(run(127, "x" * 10_000 + "\nTHE END: pytest: command not found\n"))
    assert f.message.endswith("THE END: pytest: command not found") and len(f.output_tail) <= 1500
    assert f.to_dict()["reason"] == "runner_missing" and f.to_dict()["kind"] == "environment"


def test_missing_programs_split_grader_from_agent() -> None:
    grader, agent = missing_programs(run(127, "/t/test.sh: line 1: pytest: command not found\n"
                                              "/t/test.sh: line 2: ./solve: No such file or directory\n"
                                              "/t/test.sh: line 3: /sandbox/app/x: Permission denied\n"))
    assert grader == ["pytest"] and agent == ["./solve", "/sandbox/app/x"]


def test_network_declared_but_absent_fails_before_running() -> None:
    task = Task(id="needs-net", env="terminal")
    require_network([], False, task=task)
    require_network(["verifier"], True, task=task)
    with pytest.raises(GradingFailure) as info:
        require_network(["verifier", "agent"], False, task=task, why='[verifier] network_mode = "public"')
    f = info.value
    assert f.failure == "environment" and f.reason == "network"
    assert "agent and verifier phases" in f.message and "network_mode" in f.message and "metadata.network" in str(f)


def test_check_verdict_and_exceptions() -> None:
    assert check_verdict({"reward": 0.0}, "e").reward == 0.0
    for bad in ({"reward": "lots"}, None, 1.0, Verdict(reward=math.nan), Verdict(reward=math.inf)):
        with pytest.raises(VerifierError):
            check_verdict(bad, "e")
    judge = InfraError("judge", "judge unreachable")
    assert verifier_exception("e", judge) is judge
    f = verifier_exception("e", KeyError("answer"))
    assert f.failure == "verifier" and "KeyError" in f.message and "'answer'" in f.message
