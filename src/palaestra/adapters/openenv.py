"""Run an OpenEnv environment as a Palaestra environment.

OpenEnv (the ``openenv`` package) is a Gym-style contract: ``reset()`` starts an episode and returns an
observation, ``step(action)`` returns the next observation with a ``reward`` and ``done``. Here:

- ``seed`` opens one OpenEnv episode per Palaestra session and resets it (reset arguments come from
  the task's ``metadata.reset``, e.g. ``{"seed": 3}`` or a Task-API ``{"split": ..., "index": ...}``);
  the first observation is shown to the model after the task's prompt;
- the action space is one tool (``step`` by default) whose parameters are the Action's JSON schema;
  its output is the next observation with its reward and done flag. An MCP environment (OpenEnv's
  ``MCPEnvironment``, RFC 003) instead has its MCP tools as Palaestra tools, each with its own schema;
  a call is one ``call_tool`` step, so its reward and done flag count like any step's;
- only the keyword arguments ``reset``/``step`` declare are passed (OpenEnv's examples declare
  ``reset(self)``; its default ``reset_async`` would pass ``seed`` and ``episode_id`` to it);
- ``verify`` scores from OpenEnv's own rewards as the episode's reward semantics say (``reward_mode``,
  or a row's ``metadata.reward_mode``): ``final`` (the default: the reward of the step that ended the
  episode, Gym's terminal reward, so shaped per-step rewards do not add up into the score), ``sum`` (the
  return) or ``max``; the episode counts as passed when it is done and the score reaches
  ``pass_threshold``. An environment that gives no reward (e.g. OpenEnv's echo) is graded by overriding
  ``verify``; ``state.outcomes`` holds every step's observation.

Two ways to reach the environment, chosen by what the subclass sets:

- ``openenv_url`` (or the variable named by ``openenv_url_env``): a running OpenEnv server; each
  session is an episode on its ``/ws`` WebSocket, through OpenEnv's own client (with the bearer token
  of the variable named by ``openenv_token_env``, when the server asks for one);
- ``openenv_env`` + ``openenv_action`` (``module:Class`` each): the OpenEnv ``Environment`` class in
  this process, one instance per session.

Example::

    class Echo(OpenEnvEnvironment):
        name = "echo"
        openenv_url = "http://127.0.0.1:8000"
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass, field
from typing import Any, ClassVar

from palaestra.adapters.common import check_arguments, import_object
from palaestra.adapters.openenv_sessions import (
    INSTALL_HINT,
    LocalSession,
    OpenEnvSession,
    RemoteSession,
    StepOutcome,
    clean_action_schema,
    fetch_schema,
    is_mcp_environment,
    list_local_tools,
    list_remote_tools,
)
from palaestra.adapters.openenv_tools import REWARD_MODES, mcp_parameters, mcp_result
from palaestra.core.environment import Environment
from palaestra.core.errors import ConfigError, ToolError, UnknownTool
from palaestra.core.records import Reference, Task, ToolCall, Trajectory, Verdict


@dataclass
class OpenEnvState:
    task: Task
    session: OpenEnvSession
    first: StepOutcome
    rewards: list[float] = field(default_factory=list)
    outcomes: list[StepOutcome] = field(default_factory=list)
    done: bool = False


class OpenEnvEnvironment(Environment):
    """An OpenEnv environment behind Palaestra's session API. Subclass and set where it lives."""

    mechanism = "multi-turn"
    openenv_url: ClassVar[str | None] = None
    openenv_url_env: ClassVar[str | None] = None
    openenv_token_env: ClassVar[str | None] = None  # the variable holding a bearer token for the server
    openenv_env: ClassVar[str | None] = None
    openenv_action: ClassVar[str | None] = None
    step_tool: ClassVar[str] = "step"
    step_description: ClassVar[str] = "Take one action in the environment; returns the observation, reward and done."
    reward_mode: ClassVar[str] = "final"  # final (terminal step's reward) | sum | max; "last" = final
    mcp_tools: ClassVar[bool | None] = None  # None: detected (MCPEnvironment, or tools/list on /mcp)
    require_done: ClassVar[bool] = True
    pass_threshold: ClassVar[float] = 1.0
    timeout_s: ClassVar[float] = 60.0

    def __init__(self) -> None:
        self._schema: dict[str, Any] | None = None
        self._mcp: dict[str, dict[str, Any]] | None = None  # MCP tool name -> {description, input_schema}
        self._classes: tuple[Any, Any] | None = None
        self._first_seen: dict[int, str] = {}  # id(task) -> first observation, picked up by prompt()

    # ---- where the environment lives -----------------------------------------------------------
    def url(self) -> str | None:
        from palaestra.settings import variable  # the variable this environment class names

        return (variable(self.openenv_url_env) if self.openenv_url_env else None) or self.openenv_url

    def headers(self) -> dict[str, str]:
        """What every request to the server carries: the bearer token of ``openenv_token_env``, when set
        (a Palaestra environment served with ``env serve --openenv``, a private Space)."""
        from palaestra.settings import variable

        token = variable(self.openenv_token_env) if self.openenv_token_env else None
        return {"Authorization": f"Bearer {token}"} if token else {}

    def _local_classes(self) -> tuple[Any, Any]:
        if self._classes is None:
            if not (self.openenv_env and self.openenv_action):
                raise ConfigError(
                    f"OpenEnv environment '{self.name}' names neither a server nor a class",
                    hint="set openenv_url (a running server) or openenv_env + openenv_action (module:Class)")
            if importlib.util.find_spec("openenv") is None:
                raise ConfigError("OpenEnv is not installed", hint=INSTALL_HINT)
            self._classes = (import_object(self.openenv_env, "OpenEnv environment"),
                             import_object(self.openenv_action, "OpenEnv action"))
        return self._classes

    def _open_session(self) -> OpenEnvSession:
        url = self.url()
        if url:
            return RemoteSession(url, self.timeout_s, self.headers())
        env_cls, action_cls = self._local_classes()
        return LocalSession(env_cls, action_cls)

    def action_schema(self) -> dict[str, Any]:
        """The tool's parameters: the Action schema, read once (from ``/schema`` or the Action class)."""
        if self._schema is None:
            url = self.url()
            raw = fetch_schema(url, headers=self.headers()) if url else self._local_classes()[1].model_json_schema()
            self._schema = clean_action_schema(raw)
        return self._schema

    # ---- tasks and prompt ----------------------------------------------------------------------
    def reset_args(self, task: Task) -> dict[str, Any]:
        """Keyword arguments of OpenEnv's ``reset`` for this task (``metadata.reset``)."""
        args = task.metadata.get("reset") or {}
        if not isinstance(args, dict):
            raise ConfigError(f"task '{task.id}': metadata.reset must be an object of reset() arguments")
        return dict(args)

    def observe(self, outcome: StepOutcome) -> Any:
        """The observation as the ``step`` tool returns it (JSON). Override to trim or reshape it."""
        return {k: v for k, v in outcome.observation.items() if not (k == "metadata" and not v)}

    def render(self, outcome: StepOutcome) -> str:
        """The first observation as text, shown after the task's prompt. Override for a friendlier view."""
        return json.dumps(self.observe(outcome), ensure_ascii=False, default=str)

    def prompt(self, task: Task) -> list[dict[str, Any]]:
        messages = super().prompt(task)
        first = self._first_seen.pop(id(task), None)
        if first is not None:
            note = f"Initial observation: {first}"
            last = messages[-1] if messages else None
            if last is not None and last.get("role") == "user" and isinstance(last.get("content"), str):
                last["content"] = f"{last['content']}\n\n{note}" if last["content"] else note
            else:
                messages.append({"role": "user", "content": note})
        return messages

    def mcp_tool_table(self) -> dict[str, dict[str, Any]]:
        """The MCP tools by name ({} for a plain OpenEnv environment), listed once."""
        if self._mcp is None:
            listed: list[dict[str, Any]] | None = None
            url = self.url()
            if self.mcp_tools is not False:
                if url:
                    listed = list_remote_tools(url, self.timeout_s, self.headers())
                else:
                    env_cls, action_cls = self._local_classes()
                    if self.mcp_tools or is_mcp_environment(env_cls, action_cls):
                        listed = list_local_tools(env_cls)
            if self.mcp_tools and listed is None:
                raise ConfigError(f"'{self.name}' sets mcp_tools but its OpenEnv environment lists no MCP tools")
            self._mcp = {t["name"]: {"description": t["description"], "input_schema": mcp_parameters(t)}
                         for t in listed or []}
        return self._mcp

    def tool_schemas(self, task: Task | None = None) -> list[dict[str, Any]]:
        mcp = self.mcp_tool_table()
        if mcp:
            return [{"type": "function", "function": {"name": name, "description": t["description"],
                                                      "parameters": t["input_schema"]}} for name, t in mcp.items()]
        return [{"type": "function", "function": {"name": self.step_tool, "description": self.step_description,
                                                  "parameters": self.action_schema()}}]

    # ---- session -------------------------------------------------------------------------------
    async def seed(self, task: Task) -> OpenEnvState:
        session = self._open_session()
        try:
            first = await session.reset(**self.reset_args(task))
        except BaseException:
            await session.close()
            raise
        # host.open() calls prompt(task) right after seed() returns, with no await in between
        self._first_seen[id(task)] = self.render(first)
        return OpenEnvState(task=task, session=session, first=first, done=first.done)

    async def dynamic_tool(self, state: OpenEnvState, name: str, arguments: Any) -> Any:
        mcp = self.mcp_tool_table()
        if mcp:
            if name not in mcp:
                raise UnknownTool(f"unknown tool '{name}' in environment '{self.name}'",
                                  hint=f"available tools: {', '.join(sorted(mcp))}")
            args = check_arguments(mcp[name]["input_schema"], arguments, name)
            action: dict[str, Any] = {"type": "call_tool", "tool_name": name, "arguments": args}
        elif name != self.step_tool:
            raise UnknownTool(f"unknown tool '{name}' in environment '{self.name}'",
                              hint=f"the only tool is '{self.step_tool}' (one action per call)")
        else:
            action = check_arguments(self.action_schema(), arguments, name)
        if state.done:
            raise ToolError("the episode is over (done)", hint="stop acting and give your final answer")
        outcome = await state.session.step(action)
        state.rewards.append(outcome.reward or 0.0)
        state.outcomes.append(outcome)
        state.done = outcome.done
        if mcp:
            return mcp_result(outcome)
        return {"observation": self.observe(outcome), "reward": outcome.reward, "done": outcome.done}

    async def close(self, state: OpenEnvState) -> None:
        self._first_seen.pop(id(state.task), None)
        await state.session.close()

    # ---- scoring -------------------------------------------------------------------------------
    def mode_for(self, task: Task) -> str:
        """The episode's reward semantics: the row's ``metadata.reward_mode``, else the class's."""
        return self._mode(str(task.metadata.get("reward_mode") or self.reward_mode))

    def _mode(self, mode: str) -> str:
        mode = "final" if mode == "last" else mode  # "last" was this adapter's name for it before
        if mode not in REWARD_MODES:
            raise ConfigError(f"reward_mode '{mode}' of '{self.name}'", hint="use final, sum or max")
        return mode

    def score(self, rewards: list[float], mode: str | None = None, done: bool = True) -> float:
        """``final``: the terminal step's reward (0 while the episode has not ended, when ``require_done``);
        ``sum``: the return; ``max``: the best step."""
        mode = self._mode(mode or self.reward_mode)
        if not rewards:
            return 0.0
        if mode == "final":
            return float(rewards[-1]) if done or not self.require_done else 0.0
        return float(max(rewards)) if mode == "max" else float(sum(rewards))

    def check_task(self, task: Task) -> None:
        """A row's ``metadata.reset`` must be an object of reset() arguments and its ``reward_mode`` one
        the adapter knows: checked at load, not in the middle of a rollout."""
        self.reset_args(task)
        self.mode_for(task)

    def verify(self, state: OpenEnvState, trajectory: Trajectory) -> Verdict:
        reward = self.score(state.rewards, self.mode_for(state.task), state.done)
        passed = (state.done or not self.require_done) and reward >= self.pass_threshold
        return Verdict(reward=reward, passed=passed, components={"return": float(sum(state.rewards)),
                                                                 "done": float(state.done)},
                       metadata={"steps": len(state.rewards), "rewards": state.rewards[-50:]})

    def reference(self, task: Task) -> Reference | None:
        """Gold actions, when a task row carries them (``metadata.reference_actions``: action objects, or
        for an MCP environment ``{"tool": NAME, "arguments": {...}}`` objects)."""
        actions = task.metadata.get("reference_actions")
        if not isinstance(actions, list):
            return None
        if self.mcp_tool_table():  # an MCP environment's gold calls name their tool: {"tool", "arguments"}
            calls = [ToolCall(name=str(a["tool"]), arguments=dict(a.get("arguments") or {})) for a in actions]
        else:
            calls = [ToolCall(name=self.step_tool, arguments=dict(a)) for a in actions]
        return Reference(tool_calls=calls,
                         final_answer=str(task.metadata.get("reference_answer", "done")))
