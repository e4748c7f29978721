"""The episodes of the OpenEnv face (``openenv_face.py``): one Palaestra session per reset, tool calls as
OpenEnv's MCP actions, the final answer graded by the environment's verifier.

Kept apart from the transport so the WebSocket route and the HTTP ``/mcp`` route (OpenEnv's production
mode) run the same episode logic. A :class:`Refused` carries the OpenEnv error code (``WSErrorCode``) the
transport answers with; an infrastructure failure is always one, never a reward of 0.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from palaestra.core import ids
from palaestra.core.errors import BadArguments, InfraError, PalaestraError, SessionLimit, UnknownTool
from palaestra.core.records import Task, ToolCallRecord, Trajectory
from palaestra.server.sessions import EnvironmentHost

__all__ = ["ACTION_SCHEMA", "SUBMIT_TOOL", "Episode", "OpenEnvEpisodes", "Refused", "openenv_tools"]

SUBMIT_TOOL = "submit_answer"
RESET_ARGS = ("task_id", "index", "seed", "task", "episode_id")

ACTION_SCHEMA: dict[str, Any] = {
    "title": "PalaestraAction",
    "description": "A tool call (OpenEnv's MCP action), a tool listing, or the final answer.",
    "type": "object",
    "properties": {
        "type": {"type": "string", "enum": ["call_tool", "list_tools", "answer"]},
        "tool_name": {"type": "string", "description": "call_tool: the tool to run"},
        "arguments": {"type": "object", "description": "call_tool: the tool's arguments"},
        "answer": {"type": "string", "description": "the final answer; ends the episode with its verdict"},
    },
    "additionalProperties": False,
}
OBSERVATION_SCHEMA: dict[str, Any] = {
    "title": "PalaestraObservation", "type": "object",
    "properties": {"task_id": {"type": "string"}, "messages": {"type": "array"}, "tools": {"type": "array"},
                   "tool_name": {"type": "string"}, "result": {}, "error": {"type": ["object", "null"]},
                   "verdict": {"type": "object"}, "done": {"type": "boolean"},
                   "reward": {"type": ["number", "null"]}},
}
STATE_SCHEMA: dict[str, Any] = {
    "title": "PalaestraState", "type": "object",
    "properties": {"episode_id": {"type": ["string", "null"]}, "step_count": {"type": "integer"},
                   "task_id": {"type": ["string", "null"]}, "done": {"type": "boolean"}},
}


class Refused(Exception):
    """A message the face answers with an error frame (OpenEnv's ``WSErrorCode`` values)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Episode:
    """One reset's Palaestra session and the trajectory its steps build, graded by the final answer."""

    session_id: str
    task: Task
    episode_id: str
    tools: list[dict[str, Any]]
    trajectory: Trajectory
    step_count: int = 0
    done: bool = False
    closed: bool = False
    calls: list[ToolCallRecord] = field(default_factory=list)


def openenv_tools(schemas: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Palaestra's (OpenAI-style) tool schemas as OpenEnv's MCP tool listing, plus ``submit_answer``."""
    listed = []
    for schema in schemas:
        fn = schema.get("function") or schema
        listed.append({"name": fn.get("name", ""), "description": fn.get("description") or "",
                       "input_schema": fn.get("parameters") or {"type": "object", "properties": {}}})
    listed.append({"name": SUBMIT_TOOL, "description": "Give the final answer; ends the episode and grades it.",
                   "input_schema": {"type": "object", "properties": {"answer": {"type": "string"}},
                                    "required": ["answer"]}})
    return listed


def _text(output: Any) -> str:
    return output if isinstance(output, str) else orjson.dumps(output, default=str).decode()


class OpenEnvEpisodes:
    """Episodes over one :class:`EnvironmentHost`, reset onto a list of tasks."""

    def __init__(self, host: EnvironmentHost, tasks: Sequence[Task]) -> None:
        self.host = host
        self.tasks = list(tasks)
        self.by_id = {t.id: t for t in self.tasks}
        self._turn = itertools.count()

    # ---- reset ---------------------------------------------------------------------------------
    def pick(self, args: dict[str, Any]) -> Task:
        """The task a reset asks for: ``task`` (a row), ``task_id``, ``index``, ``seed`` (modulo the task
        count), else the next one in turn. Any other argument is refused, never silently dropped."""
        unknown = sorted(set(args) - set(RESET_ARGS))
        if unknown:
            raise Refused("VALIDATION_ERROR", f"reset() got unknown arguments {unknown}; it takes "
                                               f"{', '.join(RESET_ARGS)}")
        if args.get("task") is not None:
            if not isinstance(args["task"], dict):
                raise Refused("VALIDATION_ERROR", "reset(task=...) must be a task row (a JSON object)")
            row = {"env": self.host.env.name, **args["task"]}
            if row["env"] != self.host.env.name:
                raise Refused("VALIDATION_ERROR", f"reset(task=...) is a row of '{row['env']}'; this server "
                                                  f"is '{self.host.env.name}'")
            try:
                return Task.model_validate(row)
            except ValueError as exc:
                raise Refused("VALIDATION_ERROR", f"reset(task=...): not a valid task row: {exc}") from None
        if not self.tasks:
            raise Refused("VALIDATION_ERROR", f"environment '{self.host.env.name}' serves no tasks: pass "
                                               "reset(task={...}) or serve it with a task file")
        if args.get("task_id") is not None:
            task = self.by_id.get(str(args["task_id"]))
            if task is None:
                raise Refused("VALIDATION_ERROR", f"no task '{args['task_id']}' (there are {len(self.tasks)})")
            return task
        for key in ("index", "seed"):
            value = args.get(key)
            if value is not None:
                if not isinstance(value, int) or isinstance(value, bool):
                    raise Refused("VALIDATION_ERROR", f"reset({key}=...) must be an integer")
                if key == "index" and not 0 <= value < len(self.tasks):
                    raise Refused("VALIDATION_ERROR", f"index {value} is out of range (0..{len(self.tasks) - 1})")
                return self.tasks[value % len(self.tasks)]
        return self.tasks[next(self._turn) % len(self.tasks)]

    async def reset(self, args: dict[str, Any]) -> tuple[Episode, dict[str, Any]]:
        task = self.pick(args)
        try:
            opened = await self.host.open(task)
        except SessionLimit as exc:
            raise Refused("CAPACITY_REACHED", exc.message) from None
        except PalaestraError as exc:  # an invalid task row, or the environment failed to seed
            code = "EXECUTION_ERROR" if isinstance(exc, InfraError) else "VALIDATION_ERROR"
            raise Refused(code, f"{exc.kind}: {exc.message}") from None
        episode = Episode(session_id=opened["session_id"], task=task,
                           episode_id=str(args.get("episode_id") or ids.session_id()),
                           tools=openenv_tools(opened["tools"]),
                           trajectory=Trajectory(messages=list(opened["messages"])))
        observation = {"task_id": task.id, "messages": opened["messages"], "tools": episode.tools}
        return episode, {"observation": observation, "reward": 0.0, "done": False}

    # ---- steps ---------------------------------------------------------------------------------
    async def step(self, episode: Episode, action: Any) -> dict[str, Any]:
        if not isinstance(action, dict):
            raise Refused("VALIDATION_ERROR", "an action is a JSON object")
        if episode.done:
            raise Refused("SESSION_ERROR", "the episode is over (done); reset() to start another")
        kind = action.get("type", "answer" if "answer" in action else None)
        if kind == "list_tools":
            return {"observation": {"tools": episode.tools}, "reward": 0.0, "done": False}
        if kind == "call_tool":
            name, arguments = action.get("tool_name"), action.get("arguments") or {}
            if not isinstance(name, str):
                raise Refused("VALIDATION_ERROR", "call_tool needs a string 'tool_name'")
            if name == SUBMIT_TOOL:
                answer = arguments.get("answer") if isinstance(arguments, dict) else None
                return await self.finish(episode, answer)
            return await self.call(episode, name, arguments)
        if kind == "answer":
            return await self.finish(episode, action.get("answer"))
        raise Refused("VALIDATION_ERROR", f"unknown action {str(action)[:200]}: send "
                                           '{"type": "call_tool", "tool_name", "arguments"}, {"type": '
                                           '"list_tools"} or {"answer": TEXT}')

    async def call(self, episode: Episode, name: str, arguments: Any) -> dict[str, Any]:
        episode.step_count += 1
        call_id = f"call_{episode.step_count}"
        error: dict[str, Any] | None = None
        output: Any = None
        try:
            result = await self.host.call_tool(episode.session_id, name, arguments)
        except UnknownTool as exc:
            error = {"error_type": "tool_not_found", "message": exc.message}
        except BadArguments as exc:
            error = {"error_type": "invalid_args", "message": exc.message}
        except PalaestraError as exc:  # a sandbox died under the tool: an infrastructure failure
            raise Refused("EXECUTION_ERROR", f"failed({exc.kind}): {exc.message}") from None
        else:
            if result.error:
                error = {"error_type": "execution_error", "message": str(result.error.get("message", ""))}
            output = result.output
        episode.calls.append(ToolCallRecord(name=name, arguments=arguments, call_id=call_id, output=output,
                                            error=error, status="error" if error else "ok"))
        text = f"Error ({error['error_type']}): {error['message']}" if error else _text(output)
        episode.trajectory.messages += [
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": call_id, "type": "function",
                 "function": {"name": name, "arguments": orjson.dumps(arguments, default=str).decode()}}]},
            {"role": "tool", "tool_call_id": call_id, "content": text}]
        result_body = None if error else {"data": output, "content": [{"type": "text", "text": text}],
                                          "is_error": False}
        observation = {"tool_name": name, "result": result_body, "error": error}
        return {"observation": observation, "reward": 0.0, "done": False}

    async def finish(self, episode: Episode, answer: Any) -> dict[str, Any]:
        """Grade the episode with the final answer: the verdict's reward, done. A verifier that breaks is
        an error frame (failed(verifier)), never a reward of 0."""
        if not isinstance(answer, str):
            raise Refused("VALIDATION_ERROR", "the final answer must be a string ({\"answer\": TEXT})")
        episode.step_count += 1
        traj = episode.trajectory
        traj.messages.append({"role": "assistant", "content": answer})
        traj.final_answer, traj.stop_reason = answer, "final"
        traj.tool_calls, traj.steps = list(episode.calls), episode.step_count
        episode.done = True
        try:
            verdict = await self.host.verify(episode.session_id, traj)
        except PalaestraError as exc:
            raise Refused("EXECUTION_ERROR", f"failed({exc.kind}): {exc.message}") from None
        finally:
            await self.end(episode)
        observation = {"task_id": episode.task.id, "verdict": verdict.model_dump(mode="json")}
        return {"observation": observation, "reward": float(verdict.reward), "done": True}

    async def end(self, episode: Episode | None) -> None:
        if episode is not None and not episode.closed:
            episode.closed = True
            await self.host.close(episode.session_id)

    def state(self, episode: Episode | None) -> dict[str, Any]:
        if episode is None:
            return {"episode_id": None, "step_count": 0, "task_id": None, "done": False}
        return {"episode_id": episode.episode_id, "step_count": episode.step_count, "task_id": episode.task.id,
                "done": episode.done}
