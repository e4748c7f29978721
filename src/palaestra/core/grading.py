"""The grading contract, in one place (DESIGN §5).

A verifier answers one of two things: a ``Verdict`` (the answer was graded, rightly or wrongly) or a
``GradingFailure`` (grading could not run). Only the first is ever scored; the second becomes the
rollout's ``failed(kind)`` with the reason and the tail of the grader's stderr.

Environments that grade by running a test script (``terminal``, imported Harbor tasks) describe what the
script did as a ``TestRun`` and call ``grade_test_run``: exit 126/127 or a missing interpreter or test
runner, a reward file that was required but not written or that holds no number, network errors, a broken
sandbox (``/dev/null`` unusable, no fork), a timeout or a resource limit all raise; a test that ran and
said no is a reward of 0. ``check_verdict`` and ``verifier_exception`` are what the environment server
applies to every ``verify()``, whatever the environment.

Kinds: ``environment`` (the grading environment lacks what the test needs: a command, a module, the
network), ``sandbox`` (the sandbox itself misbehaved), ``verifier`` (the grader ran but gave no usable
verdict: it crashed, timed out, hit a limit, or wrote no readable reward).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from palaestra.core.errors import FailureKind, InfraError, VerifierError
from palaestra.core.records import Task, Verdict

TAIL_CHARS = 1500
_SCAN_CHARS = 200_000  # only the end of a very long log is searched for the shapes below


class GradingFailure(InfraError):
    """Grading could not run. ``reason`` is a short machine-readable code (``runner_missing``,
    ``reward_missing``, ``reward_unparsable``, ``network``, ``sandbox_broken``, ``timeout``, ``limit``,
    ``exception``...); the message ends with the tail of the grader's output so the journal says why."""

    def __init__(self, kind: FailureKind, reason: str, message: str, *, output_tail: str = "",
                 hint: str | None = None) -> None:
        # one string that reads right wherever it lands (journal, wire, CLI): reason, what to do, then the tail
        text = f"{reason}: {message}" + (f" ({hint})" if hint else "")
        tail = output_tail.strip()[-TAIL_CHARS:]
        if tail:
            text += f"\n--- grader output (tail) ---\n{tail}"
        super().__init__(kind, text)
        self.reason = reason
        self.advice = hint
        self.output_tail = tail

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out["reason"] = self.reason
        return out


@dataclass
class RewardFile:
    """One reward file's state after the test ran: ``text`` None means not written; ``error`` means it
    exists but could not be read (too big, not a regular file)."""

    name: str
    text: str | None = None
    error: str | None = None


@dataclass
class TestRun:
    """What a test script did. ``failure`` is the sandbox's verdict on the program (``timeout``, ``oom``,
    ``limit``) or ``provider`` when the sandbox itself failed; ``agent_paths`` are the path prefixes
    that belong to the agent (its working directory), so a missing *agent* program is a wrong answer and
    a missing *grader* program is a failure."""

    __test__ = False  # not a pytest test class, despite the name

    exit_code: int
    stdout: str = ""
    stderr: str = ""
    failure: str | None = None
    detail: str = ""
    timeout_s: float | None = None
    reward_files: list[RewardFile] = field(default_factory=list)
    agent_paths: tuple[str, ...] = ()

    def output(self) -> str:
        return f"{self.stdout[-_SCAN_CHARS:]}\n{self.stderr[-_SCAN_CHARS:]}"

    def tail(self) -> str:
        return (self.stderr.strip() or self.stdout.strip())[-TAIL_CHARS:]


# ---- what a log line says -------------------------------------------------------------------------------
# "<src>: line 3: pytest: command not found" (bash), "<src>: 3: pytest: not found" (dash),
# "sh: 1: exec: pytest: not found", "zsh: command not found: pytest", "/usr/bin/env: 'python3': No such file
# or directory", "<script>: /usr/bin/python9: bad interpreter: ...", "/usr/bin/python3: No module named pytest".
_NOT_FOUND = re.compile(
    r"^(?P<src>[^:\n]+?): (?:line )?\d+: (?:exec: )?(?P<cmd>[^:\n]+): (?:command )?not found\s*$"
    r"|^(?P<src2>[^:\n]+?): (?P<cmd2>[^:\s]+): command not found\s*$"
    r"|command not found: (?P<cmd3>\S+)\s*$"
    r"|^(?:\S*/)?env: ['\u2018\"]?(?P<cmd4>[^'\u2019\":\n]+)['\u2019\"]?: No such file or directory\s*$",
    re.MULTILINE)
_BAD_INTERPRETER = re.compile(r"^(?:[^:\n]+: )*(?P<src>[^:\n]+): (?P<cmd>[^:\n]+): bad interpreter:", re.MULTILINE)
# coreutils' timeout, nice, nohup, stdbuf: "timeout: failed to run command './prog': No such file or directory"
_RUN_COMMAND = re.compile(r"failed to run command ['\u2018\"]?(?P<cmd>[^'\u2019\":\n]+)['\u2019\"]?: "
                          r"(?:No such file or directory|Permission denied)", re.MULTILINE)
_NO_MODULE = re.compile(r"^(?P<src>\S*python[\d.]*): No module named (?P<cmd>\S+)\s*$", re.MULTILINE)
# "<src>: line 1: ./run.sh: No such file or directory" / "...: Permission denied": a path that is the
# agent's (exit 126/127 from running the agent's own missing or non-executable program is a wrong answer)
_PATH_ERROR = re.compile(r"^[^:\n]+?: (?:line )?\d+: (?P<cmd>[^:\n]*/[^:\n]*): (?:No such file or directory|"
                         r"Permission denied|not found)\s*$", re.MULTILINE)
_NETWORK = re.compile(
    r"Could not resolve host|Temporary failure in name resolution|Temporary failure resolving|"
    r"Name or service not known|nodename nor servname provided|getaddrinfo failed|"
    r"failed to lookup address information|unable to resolve host address|Network is unreachable|"
    r"Failed to establish a new connection|No route to host|dns error", re.IGNORECASE)
_SANDBOX_BROKEN = re.compile(
    r"/dev/null: (?:Permission denied|Operation not permitted|No such file or directory|Read-only file system)|"
    r"cannot create /dev/null|fork: (?:retry: )?Resource temporarily unavailable|Cannot fork|can't fork",
    re.IGNORECASE)


def _is_agent_path(path: str, agent_paths: tuple[str, ...]) -> bool:
    path = path.strip()
    if "/" not in path:
        return False  # a bare name is looked up on PATH: the grading environment's, not the agent's
    if not path.startswith("/"):
        return True  # relative to the test's working directory: the agent's files
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in agent_paths)


def missing_programs(run: TestRun) -> tuple[list[str], list[str]]:
    """(programs the grader needed and the grading environment lacks, the agent's own programs that were
    missing or not executable), from the shell's and Python's messages in the test output."""
    text = run.output()
    grader: list[str] = []
    agent: list[str] = []

    def note(src: str | None, cmd: str) -> None:
        cmd = cmd.strip()
        if (src and _is_agent_path(src, run.agent_paths)) or _is_agent_path(cmd, run.agent_paths):
            agent.append(cmd)  # the agent's script calls something absent, or the agent's program is absent
        elif cmd not in grader:
            grader.append(cmd)

    for m in _NOT_FOUND.finditer(text):
        src = m.group("src") or m.group("src2")
        note(src, m.group("cmd") or m.group("cmd2") or m.group("cmd3") or m.group("cmd4") or "")
    for m in _BAD_INTERPRETER.finditer(text):
        note(m.group("src"), m.group("cmd"))
    for m in _RUN_COMMAND.finditer(text):
        note(None, m.group("cmd"))
    for m in _NO_MODULE.finditer(text):
        note(None, f"{m.group('cmd')} (python -m)")
    for m in _PATH_ERROR.finditer(text):
        if _is_agent_path(m.group("cmd"), run.agent_paths):
            agent.append(m.group("cmd").strip())
    return grader, agent


def parse_reward(file: RewardFile) -> tuple[float, dict[str, float]]:
    """``reward.txt``: one number (the first word); ``reward.json``: ``{"reward": x, ...}`` (or one
    number under any name), every numeric field kept as a component. Raises GradingFailure."""
    if file.error is not None:
        raise GradingFailure("verifier", "reward_unreadable", f"{file.name} could not be read: {file.error}")
    text = (file.text or "").strip()
    value: Any
    components: dict[str, float] = {}
    try:
        if file.name.endswith(".json"):
            data = json.loads(text)
            if isinstance(data, dict):
                components = {str(k): float(v) for k, v in data.items()
                              if isinstance(v, (int, float)) and not isinstance(v, bool)}
                value = data["reward"] if "reward" in data else (
                    next(iter(components.values())) if len(components) == 1 else None)
            else:
                value = data
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError("no numeric 'reward' field")
        else:
            value = text.split()[0] if text else ""
        reward = float(value)
        if not math.isfinite(reward):
            raise ValueError(f"{reward} is not a finite number")
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        raise GradingFailure(
            "verifier", "reward_unparsable", f"{file.name} holds no reward number ({exc}): {text[:100]!r}",
            hint="the test script must write one number in [0, 1] (reward.txt) or {\"reward\": x} (reward.json)",
        ) from None
    return min(1.0, max(0.0, reward)), components


def grade_test_run(run: TestRun, *, reward_required: bool = False) -> Verdict:
    """The verdict of a test script's run, or a raised ``GradingFailure`` when the run cannot be one.

    Reward: the first reward file written decides (clamped to [0, 1]); without one, exit 0 is 1 and
    anything else 0, unless ``reward_required`` (Harbor: the reward file *is* the verdict). A result that
    is not full reward and shows the grader could not run (a missing command, module or network) is a
    failure, not a 0; a broken sandbox or a timeout or limit is a failure whatever the result."""
    tail = run.tail()
    if run.failure == "provider":
        raise GradingFailure("sandbox", "sandbox", f"the grading sandbox failed: {run.detail}", output_tail=tail)
    if run.failure == "timeout":
        limit = f" after {run.timeout_s:g} s" if run.timeout_s else ""
        raise GradingFailure("verifier", "timeout", f"the test script did not finish{limit}",
                             output_tail=tail, hint="raise [verifier] timeout_sec in task.toml, or speed up the test")
    if run.failure is not None:
        raise GradingFailure("verifier", "limit", f"the test script hit a resource limit ({run.failure}: "
                             f"{run.detail})", output_tail=tail,
                             hint="raise metadata.memory_mb / disk_mb for this task, or make the test lighter")
    text = run.output()
    broken = _SANDBOX_BROKEN.search(text)
    if broken:
        raise GradingFailure("sandbox", "sandbox_broken", f"the grading sandbox cannot run ordinary programs "
                             f"({broken.group(0)!r} in the test output)", output_tail=tail,
                             hint="check the sandbox provider (`palaestra sandbox info`) or pick another")

    written = next((f for f in run.reward_files if f.text is not None or f.error is not None), None)
    components: dict[str, float] = {}
    metadata: dict[str, Any] = {"exit_code": run.exit_code, "test_output": (run.stdout + run.stderr)[-2000:]}
    if written is not None:
        reward, components = parse_reward(written)
        metadata["reward_file"] = (written.text or "").strip()[:100]
        metadata["reward_file_name"] = written.name
    elif reward_required:
        names = " or ".join(f.name for f in run.reward_files) or "a reward file"
        raise GradingFailure("verifier", "reward_missing", f"the test script exited {run.exit_code} without "
                             f"writing {names}", output_tail=tail,
                             hint="the test must write its reward even when the answer is wrong "
                                  "(e.g. `echo 0 > /logs/verifier/reward.txt`)")
    else:
        reward = 1.0 if run.exit_code == 0 else 0.0

    if reward < 1.0:
        grader, agent = missing_programs(run)
        if grader:
            raise GradingFailure("environment", "runner_missing", f"the grading environment lacks "
                                 f"{', '.join(repr(g) for g in grader[:5])}, which the test needs "
                                 f"(test script exit code {run.exit_code})", output_tail=tail,
                                 hint="use an image that has it (metadata.image), or install it in the test")
        if run.exit_code in (126, 127) and not agent:
            what = "could not execute a program" if run.exit_code == 126 else "ran a command that was not found"
            raise GradingFailure("environment", "runner_missing", f"the test script {what} (exit "
                                 f"{run.exit_code})", output_tail=tail,
                                 hint="a missing interpreter or test runner in the grading environment")
        network = _NETWORK.search(text)
        if network:
            raise GradingFailure("environment", "network", f"the test needs the network, which the grading "
                                 f"sandbox does not have ({network.group(0)!r})", output_tail=tail,
                                 hint="vendor what the test downloads into the image, or allow the network "
                                      "for this task (metadata.network = \"host\")")
    components.setdefault("tests", reward)
    return Verdict(reward=reward, passed=reward >= 1.0, components=components, metadata=metadata)


@dataclass
class GradingProbe:
    """A task built to make grading fail in one known way, for ``env check``: verifying a session of
    ``task`` (after ``calls``) must raise a failure of ``kind``, never answer a Verdict. An environment
    offers probes with ``grading_probes(task, workdir) -> list[GradingProbe]`` (files it writes go under
    ``workdir``, which the caller removes)."""

    name: str
    task: Task
    kind: FailureKind
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


def require_network(needed_by: Iterable[str], available: bool, *, task: Task, why: str = "") -> None:
    """Fail before anything runs when a task declares it needs the network and its sandbox has none."""
    phases = sorted(set(needed_by))
    if phases and not available:
        raise GradingFailure(
            "environment", "network", f"task '{task.id}' needs the network for its {' and '.join(phases)} "
            f"{'phase' if len(phases) == 1 else 'phases'}{f' ({why})' if why else ''}, and its sandbox has none",
            hint="set metadata.network = \"host\" on the row to allow it, or remove the need from the task")


def check_verdict(verdict: Any, env_name: str) -> Verdict:
    """What ``verify()`` returned, as a Verdict; anything else (or a reward that is not a finite number)
    is the verifier's failure, never a score."""
    if isinstance(verdict, dict):
        try:
            verdict = Verdict.model_validate(verdict)
        except ValueError as exc:
            raise VerifierError(f"verify() of '{env_name}' returned a dict that is no Verdict: {exc}"[:2000]) from None
    if not isinstance(verdict, Verdict):
        raise VerifierError(f"verify() of '{env_name}' returned {type(verdict).__name__}, not a Verdict")
    if not math.isfinite(verdict.reward):
        raise VerifierError(f"verify() of '{env_name}' returned a reward of {verdict.reward}",
                            hint="a reward is a finite number; raise an error when grading cannot run")
    return verdict


def verifier_exception(env_name: str, exc: BaseException) -> InfraError:
    """An exception out of ``verify()``: a typed failure keeps its kind (failed(judge), failed(sandbox)),
    anything else is failed(verifier) with the exception's message."""
    if isinstance(exc, InfraError):
        return exc
    return VerifierError(f"verifier of '{env_name}' raised {type(exc).__name__}: {exc}"[:2000],
                         hint="this is a bug in the environment's verify(); the rollout is failed(verifier), not 0")
