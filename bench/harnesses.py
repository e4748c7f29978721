"""The harness matrix: every installed harness on the same small terminal task, against the scripted model
(or the local one), one table. Figures, not a test; tests/bench/test_harnesses_bench.py runs `--tiny`.

  python bench/harnesses.py                      # every installed harness with a scripted policy, 3 rollouts each
  python bench/harnesses.py --tiny               # 1 rollout of the in-process harnesses and Aider (CI's smoke size)
  python bench/harnesses.py --harness pi,aider   # only these
  python bench/harnesses.py --model local --harness openai-agents,smolagents,strands-agents   # token columns

The task is the `terminal` environment's `terminal-hello-file` (write `hello.txt`), graded in the
environment's own sandbox. With the scripted model each harness gets a two-step policy in *its* vocabulary
(its shell tool's name and arguments; Aider an edit in its `whole` format; smolagents its `final_answer`
tool), so a passed rollout shows the harness ran the command, handed the workspace back and was graded.
With ``--model local`` (SmolLM2-135M on CPU) the model decides, so rewards mean little; what counts there
are the token columns: the share of calls whose prompt and generated ids were captured, and the turns
whose prompt did not extend the previous prompt + generation (drift; calls continue from the exact ids of
the turn before when the harness resent the conversation unchanged).

Columns: harness, installed version, dialect, rollouts, scored, mean reward, failure kinds, model calls per
rollout, calls captured (the trajectory's model calls / the calls the backend served), token-id coverage,
drifted / checked turns, wall and CPU seconds per rollout (CPU: this process and its children, the CLIs).
A markdown table goes to stdout, then one JSON line with every row.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import time
from collections import Counter
from typing import Any

from palaestra.agents.catalog import describe
from palaestra.agents.registry import agent_names, make_agent
from palaestra.core.records import Rollout
from palaestra.envs.terminal.env import Terminal
from palaestra.models.base import CallContext
from palaestra.models.scripted import ScriptedBackend
from palaestra.placement import mount_env
from palaestra.rollout.runner import run_rollout
from palaestra.server.model_proxy import ModelProxy
from palaestra.train.sequence import build_samples

TASK_ID = "terminal-hello-file"
CMD = "printf 'Hello, world!\\n' > hello.txt && echo done"
DONE = "hello.txt is written."
SUBMIT = "printf 'COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\\nhello.txt is written\\n'"


def _call(name: str, **args: str) -> dict[str, Any]:
    return {"content": "", "tool_calls": [{"name": name, "arguments": args}]}


def _terminus(keystrokes: list[str]) -> dict[str, Any]:
    """A Terminus-2 answer: its JSON (keystrokes for its tmux pane); ``task_complete`` twice ends it (the second
    confirms)."""
    return {
        "content": json.dumps(
            {
                "analysis": DONE if not keystrokes else "hello.txt is missing.",
                "plan": "Write hello.txt, then finish.",
                "task_complete": True,
                "commands": [{"keystrokes": k, "duration": 0.5} for k in keystrokes],
            }
        )
    }


# Each harness's scripted policy for the task: its own shell tool, then its own way of finishing.
POLICIES: dict[str, list[dict[str, Any]]] = {
    "tool": [_call("run", cmd=CMD), {"content": DONE}],
    "bash": [{"content": f"Writing it.\n```bash\n{CMD}\n```"}, {"content": f"```bash\nsubmit\n{DONE}\n```"}],
    "langgraph": [_call("run", cmd=CMD), {"content": DONE}],
    "openai-agents": [_call("run", cmd=CMD), {"content": DONE}],
    "strands-agents": [_call("run", cmd=CMD), {"content": DONE}],
    "smolagents": [_call("run", cmd=CMD), _call("final_answer", answer=DONE)],
    "aider": [{"content": "hello.txt\n```\nHello, world!\n```\n"}],
    "codex": [_call("exec_command", cmd=CMD), {"content": DONE}],
    "claude-code": [_call("Bash", command=CMD, description="write hello.txt"), {"content": DONE}],
    "opencode": [_call("bash", command=CMD, description="write hello.txt"), {"content": DONE}],
    "kilocode": [_call("bash", command=CMD, description="write hello.txt"), {"content": DONE}],
    "pi": [_call("bash", command=CMD), {"content": DONE}],
    "qwen-code": [_call("run_shell_command", command=CMD), {"content": DONE}],
    "gemini-cli": [_call("run_shell_command", command=CMD), {"content": DONE}],
    "openclaw": [_call("exec", command=CMD), {"content": DONE}],
    "mini-swe-agent": [_call("bash", command=CMD), _call("bash", command=SUBMIT)],
    "hermes": [_call("terminal", command=CMD), {"content": DONE}],
    "openhands": [_call("terminal", command=CMD), _call("finish", message=DONE)],
    "terminus-2": [_terminus([CMD + "\n"]), _terminus([])],
}
NOT_HERE = ("single", "remote")  # no tools (a QA harness); a harness served elsewhere
TINY = ("tool", "openai-agents", "smolagents", "strands-agents", "aider")


class Counting:
    """The backend, counting the calls it served (to set against the trajectory's model calls)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = getattr(inner, "name", "backend")
        self.served = 0

    async def chat(self, request: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
        self.served += 1
        out: dict[str, Any] = await self.inner.chat(request, ctx)
        return out

    async def aclose(self) -> None:
        return None


def _cpu() -> float:
    return sum(
        r.ru_utime + r.ru_stime
        for r in (resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN))
    )


def _local_backend(max_tokens: int) -> Any:
    from palaestra.models.local import make_local_backend
    from palaestra.train.continuation import ContinuationBackend

    backend = make_local_backend("local", max_batch=4, default_max_tokens=max_tokens, notify=lambda _: None)
    backend.start()
    backend.engine.loaded.result(timeout=600)
    return ContinuationBackend(backend)


async def run_harness(name: str, env: Any, rollouts: int, local: Any, max_steps: int) -> dict[str, Any]:
    info = describe(name)
    row: dict[str, Any] = {
        "harness": name,
        "version": info.get("installed_version") or info.get("version"),
        "dialect": info.get("dialect"),
        "installed": info.get("installed"),
        "rollouts": 0,
    }
    if not info.get("installed"):
        row["missing"] = info.get("missing")
        return row
    task = next(t for t in Terminal().examples() if t.id == TASK_ID)
    results: list[Rollout] = []
    served = 0
    t0, c0 = time.perf_counter(), _cpu()
    for i in range(rollouts):
        inner = local if local is not None else ScriptedBackend("replay", replay=POLICIES[name])
        counting = Counting(inner)
        sampling = {"temperature": 0.0} if local is not None else {}
        r = await run_rollout(
            task.model_copy(update={"id": f"{TASK_ID}-{i}"}),
            env=env,
            agent=make_agent(name, max_steps=max_steps),
            proxy=ModelProxy(counting),
            model_name="local" if local is not None else "scripted",
            sampling=sampling,
            deadline_s=600,
        )
        results.append(r)
        served += counting.served
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    calls = [c for r in results for c in r.trajectory.model_calls]
    samples = [build_samples(r) for r in results if r.outcome.status == "scored"]
    with_ids = sum(1 for c in calls if c.prompt_token_ids and c.generation_token_ids is not None)
    scored = [r for r in results if r.outcome.status == "scored"]
    row.update(
        {
            "rollouts": rollouts,
            "scored": len(scored),
            "mean_reward": round(sum(r.reward or 0.0 for r in scored) / len(scored), 3) if scored else None,
            "failures": dict(Counter(str(r.outcome.kind) for r in results if r.outcome.status != "scored")),
            "model_calls_per_rollout": round(len(calls) / rollouts, 2),
            "captured": f"{len(calls)}/{served}",
            "all_captured": len(calls) == served,
            "token_id_coverage": round(with_ids / len(calls), 3) if calls else None,
            "drifted_turns": sum(len(s.drifts) for s in samples),
            "checked_turns": sum(s.checked for s in samples),
            "wall_s_per_rollout": round(wall / rollouts, 2),
            "cpu_s_per_rollout": round(cpu / rollouts, 2),
        }
    )
    if any(r.outcome.status != "scored" for r in results):
        row["first_failure"] = next(str(r.outcome.message) for r in results if r.outcome.status != "scored")[:300]
    return row


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "harness",
        "version",
        "dialect",
        "rollouts",
        "scored",
        "reward",
        "failures",
        "calls/rollout",
        "captured",
        "token ids",
        "drift",
        "wall s",
        "CPU s",
    )
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if not r.get("rollouts"):
            why = "not installed" if not r.get("installed") else "no scripted policy"
            lines.append(
                f"| {r['harness']} | {r.get('version') or '-'} | {r.get('dialect') or '-'} | "
                f"{why} |" + " |" * (len(head) - 4)
            )
            continue
        cov = r["token_id_coverage"]
        drift = f"{r['drifted_turns']}/{r['checked_turns']}" if cov else "n/a"
        fails = ", ".join(f"{k} {v}" for k, v in r["failures"].items()) or "-"
        lines.append(
            f"| {r['harness']} | {r['version'] or '-'} | {r['dialect'] or '-'} | {r['rollouts']} | "
            f"{r['scored']} | {r['mean_reward']} | {fails} | {r['model_calls_per_rollout']} | "
            f"{r['captured']} | {cov if cov else 'none'} | {drift} | {r['wall_s_per_rollout']} | "
            f"{r['cpu_s_per_rollout']} |"
        )
    return "\n".join(lines)


async def main(args: argparse.Namespace) -> int:
    others = [n for n in agent_names() if n not in POLICIES and n not in NOT_HERE]
    names = args.harness.split(",") if args.harness else list(TINY if args.tiny else [*POLICIES, *others])
    unknown = [n for n in names if n not in POLICIES and args.model != "local"]
    local = _local_backend(args.max_tokens) if args.model == "local" else None
    mounted = await mount_env("terminal", "inprocess")
    rows: list[dict[str, Any]] = []
    try:
        for name in names:
            if name in unknown:
                info = describe(name)
                rows.append(
                    {
                        "harness": name,
                        "version": info.get("version"),
                        "dialect": info.get("dialect"),
                        "installed": info.get("installed"),
                        "rollouts": 0,
                    }
                )
                continue
            rows.append(
                await run_harness(name, mounted.client, 1 if args.tiny else args.rollouts, local, args.max_steps)
            )
            print(f"# {name}: done", file=sys.stderr, flush=True)
    finally:
        await mounted.stop()
        if local is not None:
            local.engine.close()
    print(table(rows))
    print(json.dumps({"bench": "harnesses", "model": args.model, "task": TASK_ID, "rows": rows}))
    ran = [r for r in rows if r.get("rollouts")]
    ok = bool(ran) and all(r["scored"] == r["rollouts"] and r["all_captured"] for r in ran)
    return 0 if ok else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="1 rollout of the in-process harnesses and Aider")
    parser.add_argument("--harness", default="", help="comma-separated harness names (default: all with a policy)")
    parser.add_argument("--rollouts", type=int, default=3)
    parser.add_argument("--model", choices=("scripted", "local"), default="scripted")
    parser.add_argument("--max-tokens", type=int, default=48, help="with --model local")
    parser.add_argument("--max-steps", type=int, default=4)
    sys.exit(asyncio.run(main(parser.parse_args())))
