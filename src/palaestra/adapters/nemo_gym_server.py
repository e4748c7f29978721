"""A real NeMo Gym resources server, driven over its HTTP API, as a Palaestra environment.

``--env nemo_gym:<server>`` names one of the resources servers shipped in the installed NeMo Gym wheel
(``site-packages/resources_servers/<server>/``). The server runs as it is, in NeMo Gym's own venv and
Python, as a child process bound to 127.0.0.1 (see ``nemo_gym_launch``); this process only speaks HTTP
to it:

- ``seed``: a fresh HTTP client (its own cookie jar, which is how NeMo Gym keys session state) posts the
  row to ``/seed_session``;
- tools: every function tool of the row's ``responses_create_params.tools`` is ``POST /<tool>`` with the
  arguments as the JSON body, answered with the server's JSON;
- ``verify``: ``POST /verify`` with the row and the rollout as a Responses ``response``; the reward is
  NeMo Gym's own.

A gymnasium-style server (NeMo Gym's ``GymnasiumServer``: no ``/seed_session``) resets an episode at
``seed`` (``POST /reset``) and grades the rollout as one ``POST /step`` with it; the step's reward is the
verdict's, its ``terminated`` / ``info`` in the verdict's metadata.

A server whose verify calls a model (a judge or a policy named by its YAML's ``responses_api_models``
references) gets them all resolved to one Palaestra model server on 127.0.0.1 speaking the Responses
API: the run's ``judge_model`` (a base URL, or a model spec served here for as long as the environment
lives), ``DEFAULT_JUDGE`` when the run names none. The verdict says which (``nemo_gym_model``).

The server's ``data/example*.jsonl`` rows are the environment's bundled tasks. Where a row carries its
answer, ``nemo_gym_references`` derives the reference the scripted oracle replays. Servers that need
packages the NeMo venv lacks fail at start with the import error, as an environment failure naming the
server and quoting what it logged.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import httpx
import orjson

from palaestra.adapters import nemo_gym_episodes as nemo_eps
from palaestra.adapters import nemo_gym_references as nemo_refs
from palaestra.adapters import nemo_gym_rows as nemo_rows
from palaestra.adapters.nemo_gym import assistant_items, tool_output_item
from palaestra.adapters.nemo_gym_agent_launch import environment_server
from palaestra.adapters.nemo_gym_launch import (
    NemoServerProcess,
    cohort_size,
    names_model_server,
    prompt_agent,
    server_dir,
)
from palaestra.core.environment import Environment
from palaestra.core.errors import BadArguments, ConfigError, EnvironmentFailure, InvalidTask, ToolError, UnknownTool
from palaestra.core.records import Reference, Task, Trajectory, Verdict

FAMILY = "nemo_gym"
TASK_INDEX_KEY, ROLLOUT_INDEX_KEY = "_ng_task_index", "_ng_rollout_index"  # NeMo Gym's collector's names
ROW_ID_KEY = "nemo_gym_row_id"  # a bundled row's own ``id`` (of its own type: some servers verify it)
_PALAESTRA_KEYS = {nemo_rows.REQUEST_KEY, nemo_rows.AGENT_REF_KEY, nemo_rows.SAMPLING_KEY, ROW_ID_KEY,
                   nemo_rows.ROW_IDS_KEY, nemo_rows.ORIGINAL_ID_KEY}


# Server name → how its reference follows from a row (kept for callers of the old name).
REFERENCES = nemo_refs.CUSTOM
# The model every model server a NeMo Gym config names (its judge, its policy) resolves to when the run
# names none: a scripted model with a fixed reply, in the JSON shape a request asks for where it asks for one
# (``response_format``), so verify runs through and its verdict says who judged.
DEFAULT_JUDGE = "scripted:format"
# A row run by NeMo Gym's own agent (``--agent nemo-gym``, adapters/nemo_gym_agent.py): that agent seeds and
# verifies on its own resources server, and its /run answer (the verify response) is in the trajectory.
AGENT_NAME = "nemo-gym"
AGENT_RUN_KEY = "nemo_gym_run"


def agent_driven(task: Task) -> bool:
    """Whether NeMo Gym's own agent runs the row (its agent spec is ``nemo-gym`` or ``nemo-gym:<type>``)."""
    return (task.agent or "").split("?")[0].split(":")[0] == AGENT_NAME
_NO_JUDGE = frozenset({"keyword", "builtin:keyword", "builtin:reference-match"})  # the native judge's matcher


def nemo_row(task: Task) -> dict[str, Any]:
    """The NeMo Gym row back from a task: its verifier fields, ``agent_ref`` and the Responses request."""
    row = {k: v for k, v in task.metadata.items() if k not in _PALAESTRA_KEYS}
    # The row's own id, kept out of metadata by the row loader; a row loaded from a file gives its task id.
    row["id"] = task.metadata.get(ROW_ID_KEY, task.metadata.get(nemo_rows.ORIGINAL_ID_KEY, task.id))
    ids = task.metadata.get(nemo_rows.ROW_IDS_KEY)
    if isinstance(ids, dict):  # ``id`` / ``uuid`` / ``task_id`` as the row wrote them
        row.update(ids)
    if task.metadata.get(nemo_rows.AGENT_REF_KEY) is not None:
        row["agent_ref"] = task.metadata[nemo_rows.AGENT_REF_KEY]
    request = task.metadata.get(nemo_rows.REQUEST_KEY)
    row["responses_create_params"] = dict(request) if isinstance(request, dict) else {"input": task.messages()}
    return row


def response_body(task: Task, trajectory: Trajectory, prompt_length: int) -> dict[str, Any]:
    """The rollout after the prompt as a Responses ``response`` object, what NeMo Gym's verify reads."""
    items: list[dict[str, Any]] = []
    for i, m in enumerate(trajectory.messages[prompt_length:]):
        role = m.get("role")
        if role == "assistant":
            items += assistant_items(m, f"msg_{i}", i)
        elif role == "tool":
            items.append(tool_output_item(m))
    request = nemo_row(task)["responses_create_params"]
    return {"id": f"resp_{task.id}", "object": "response", "created_at": int(time.time()),
            "model": "palaestra", "output": items, "tools": request.get("tools", []),
            "tool_choice": request.get("tool_choice", "auto"),
            "parallel_tool_calls": bool(request.get("parallel_tool_calls", True))}


@dataclass
class NemoSession:
    """One Palaestra session: the task and an HTTP client whose cookie jar is the NeMo session."""

    task: Task
    client: httpx.AsyncClient
    tools: frozenset[str]
    gymnasium: bool = False  # a GymnasiumServer: /reset and /step instead of /seed_session and /verify
    observation: str | None = None  # what its /reset answered
    episode: nemo_eps.Episode | None = None  # a server that drives the episode (its seed answered obs)
    slot: int = 0  # its rollout index among the row's rollouts (``_ng_rollout_index``)
    verified: bool = False  # its slot is taken for good: a retry of a failed rollout reuses a free one


class NemoGymServerEnvironment(Environment):
    """Base of the generated ``nemo_gym:<server>`` classes; ``server`` names the resources server."""

    mechanism = "multi-turn"
    domain = "agent"
    server: ClassVar[str] = ""
    venv: ClassVar[Path | None] = None
    timeout_s: ClassVar[float] = 120.0

    def __init__(self, judge: str | None = None, judge_model_name: str | None = None) -> None:
        """``judge`` (the run's ``judge_model``) is what the server's model servers resolve to: a base URL
        of a Responses API server (``http://127.0.0.1:PORT``), or a Palaestra model spec served on
        127.0.0.1 for as long as this environment lives; ``DEFAULT_JUDGE`` when the run names none."""
        self._process = NemoServerProcess(self.server, self.venv)
        self._judge_spec = DEFAULT_JUDGE if judge is None or judge in _NO_JUDGE else judge
        self._judge_model_name = judge_model_name
        self._judge_servers = contextlib.ExitStack()
        self._needs_model = names_model_server(self.server, self.venv)
        self._configured = False
        # task id → (messages, tools) its server's /seed_session answered, where the server builds the prompt
        self._observed: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {}
        # NeMo Gym's collector numbers each distinct row (``_ng_task_index``) and each of its repeats
        # (``_ng_rollout_index``); a cohort server (``cohort_size``) groups a row's rollouts by them.
        self._task_index: dict[str, int] = {}
        self._slots: dict[str, set[int]] = {}  # task id → rollout indices taken (in flight or verified)
        self._cohort = 1

    @property
    def judge(self) -> str | None:
        """Who answers the server's model calls (None: its config names no model server)."""
        return self._judge_spec if self._needs_model else None

    def _model_url(self) -> str:
        """The base URL of the model server the NeMo server's config names, started on first use."""
        spec = self._judge_spec
        if spec.startswith(("http://", "https://")):
            return spec.rstrip("/").removesuffix("/v1")
        from palaestra.models.factory import make_backend
        from palaestra.server.loopback import serve_app
        from palaestra.server.model_app import create_model_app
        from palaestra.server.model_proxy import ModelProxy

        backend = make_backend(spec, model_name=self._judge_model_name)
        return self._judge_servers.enter_context(serve_app(create_model_app(ModelProxy(backend))))

    # ---- tasks ---------------------------------------------------------------------------------
    def examples(self) -> list[Task]:
        """The server's published ``data/example*.jsonl`` rows (not its recorded rollouts), in order."""
        from palaestra.rollout.tasks import parse_row  # adapters sit above rollout

        tasks: list[Task] = []
        data = server_dir(self.server, self.venv) / "data"
        for path in sorted(data.glob("example*.jsonl")):
            if "rollout" in path.name:
                continue
            lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
            for n, line in enumerate(lines, 1):
                raw = orjson.loads(line)
                task = parse_row(raw, f"{self.server}-{path.stem}-{n}", self.name)
                if "id" in raw:
                    task.metadata[ROW_ID_KEY] = raw["id"]
                tasks.append(task)
        return tasks

    def prompt(self, task: Task) -> list[dict[str, Any]]:
        """The row's input, then what the server's seed answered as the episode's start (where it did)."""
        seen = self._observed.get(task.id)
        return super().prompt(task) + ([dict(m) for m in seen[0]] if seen else [])

    def tool_schemas(self, task: Task | None = None) -> list[dict[str, Any]]:
        if task is not None and task.id in self._observed:  # the tools the server's seed answered
            return list(self._observed[task.id][1])
        if task is None:
            found = self.examples()
            task = found[0] if found else None
        return list(task.tools or []) if task is not None else []

    def reference(self, task: Task) -> Reference | None:
        return nemo_refs.reference(self.server, task)

    def check_task(self, task: Task) -> None:
        """A row with no input at all is refused, naming the NeMo Gym agent that builds its prompt (from the
        server's /seed_session, or from row fields of its own): Palaestra's agents send the row's input."""
        if any(m.get("content") for m in task.messages()) or agent_driven(task):
            return
        ref = task.metadata.get(nemo_rows.AGENT_REF_KEY)
        agent = prompt_agent(self.server, self.venv, ref.get("name") if isinstance(ref, dict) else None)
        if agent in nemo_eps.OBSERVING_AGENTS:  # its /seed_session answers the prompt: driven as it is
            return
        if nemo_rows.REQUEST_KEY not in task.metadata and (served := environment_server(self.server, self.venv)):
            raise InvalidTask(f"needs_agent: the row is no Responses request (no responses_create_params): NeMo "
                              f"Gym's Environment Server '{served}' runs it (its episode protocol, driving "
                              "agents of its own), which Palaestra does not drive", hint="see docs/nemo_gym_servers.md")
        raise InvalidTask(f"needs_agent: the row's responses_create_params.input is empty; NeMo Gym's "
                          f"'{agent or 'own'}' agent builds the prompt itself, which Palaestra's agents do not",
                          hint="give the prompt in responses_create_params.input")

    # ---- sessions ------------------------------------------------------------------------------
    async def seed(self, task: Task) -> NemoSession:
        if not self._configured:  # before the first start: the config variant of the agent the rows name
            self._configured = True
            ref = task.metadata.get(nemo_rows.AGENT_REF_KEY)
            agent = ref.get("name") if isinstance(ref, dict) else ref
            self._process.agent = agent if isinstance(agent, str) and agent else None
            self._needs_model = names_model_server(self.server, self.venv, self._process.agent)
            self._cohort = cohort_size(self.server, self.venv, self._process.agent)
        if agent_driven(task):  # NeMo Gym's agent seeds its own resources server: nothing to start here
            return NemoSession(task, httpx.AsyncClient(trust_env=False), frozenset())
        if self._needs_model and self._process.model_url is None:
            self._process.model_url = self._model_url()
        base = await self._process.url()
        client = httpx.AsyncClient(base_url=base, timeout=self.timeout_s, trust_env=False)
        names = frozenset(str((t.get("function") or t).get("name")) for t in task.tools or [])
        taken = self._slots.setdefault(task.id, set())
        slot = min(set(range(len(taken) + 1)) - taken)  # the lowest free: a retry takes its failed one's
        taken.add(slot)
        session = NemoSession(task, client, names, slot=slot)
        try:
            seeded = await self._post(session, "/seed_session", self._row(session), missing_ok=True)
            if seeded.status_code == 404:  # NeMo Gym's gymnasium-style servers reset an episode instead
                session.gymnasium = True
                reset = (await self._post(session, "/reset", nemo_row(task))).json()
                session.observation = reset.get("observation") if isinstance(reset, dict) else None
            else:
                with contextlib.suppress(ValueError):
                    session.episode = nemo_eps.episode(seeded.json())
            if session.episode is not None:
                session.tools = frozenset(t["function"]["name"] for t in session.episode.tools)
                self._observed[task.id] = (session.episode.messages, session.episode.tools)
        except BaseException:
            taken.discard(slot)
            await client.aclose()
            raise
        return session

    def _row(self, session: NemoSession) -> dict[str, Any]:
        """The row as NeMo Gym's collector posts it: with its task and rollout index (the row's own where it
        carries them, as a row NeMo Gym materialized does)."""
        row = nemo_row(session.task)
        row.setdefault(TASK_INDEX_KEY, self._task_index.setdefault(session.task.id, len(self._task_index)))
        row.setdefault(ROLLOUT_INDEX_KEY, session.slot)
        return row

    async def _post(self, session: NemoSession, path: str, body: Any, missing_ok: bool = False) -> httpx.Response:
        try:
            response = await session.client.post(path, json=body)
        except httpx.HTTPError as exc:  # what the server logged meanwhile says why (a Ray actor with no GPU, ...)
            logged = self._process.log_tail()
            raise EnvironmentFailure(f"NeMo Gym server '{self.server}' did not answer {path}: {exc!r}"
                                     + (f"; the server logged: {logged}" if logged else "")) from exc
        if missing_ok and response.status_code == 404:
            return response
        if response.status_code >= 500 or (path in _EPISODE_PATHS and response.status_code >= 400):
            logged = self._process.log_tail()
            raise EnvironmentFailure(f"NeMo Gym server '{self.server}' answered {path} with "
                                     f"HTTP {response.status_code}: {response.text[:500]}"
                                     + (f"; the server logged: {logged}" if logged else ""))
        return response

    async def dynamic_tool(self, state: NemoSession, name: str, arguments: Any) -> Any:
        if name not in state.tools:
            raise UnknownTool(f"unknown tool '{name}' in NeMo Gym server '{self.server}'",
                              hint=f"available tools: {', '.join(sorted(state.tools)) or '(none)'}")
        if arguments is not None and not isinstance(arguments, dict):
            raise BadArguments(f"tool '{name}' takes a JSON object of arguments")
        if state.episode is not None:  # the server's episode: a tool call is one /step of it
            step = await self._post(state, "/step", nemo_eps.call_step(state.episode, name, arguments))
            return nemo_eps.observe(state.episode, step.json())
        response = await self._post(state, f"/{name}", arguments or {})
        if response.status_code == 422:
            raise BadArguments(f"tool '{name}': {response.text[:500]}")
        if response.status_code >= 400:
            raise ToolError(f"tool '{name}' answered HTTP {response.status_code}: {response.text[:500]}")
        try:
            return response.json()
        except ValueError:
            return response.text

    async def verify(self, state: NemoSession, trajectory: Trajectory) -> Verdict:
        if agent_driven(state.task) or getattr(trajectory, AGENT_RUN_KEY, None) is not None:  # --agent nemo-gym
            return agent_verdict(self.server, trajectory)
        prompt_length = len(self.prompt(state.task))
        body = self._row(state) | {"response": response_body(state.task, trajectory, prompt_length)}
        ep = state.episode
        if ep is not None:  # the final text is the episode's last step; /close scores it, /verify reports it
            final = trajectory.final_text()
            if final and not ep.done:
                nemo_eps.observe(ep, (await self._post(state, "/step", nemo_eps.text_step(ep, final))).json())
            await self._post(state, "/close", {"env_id": ep.env_id})
            ep.closed = True
            group = str(state.task.metadata.get("task_idx", state.task.id))
            body["response"] |= nemo_eps.verify_fields(ep, group)
        # A gymnasium server grades the rollout as one action of its episode: /step answers the reward.
        try:
            answer = (await self._post(state, "/step" if state.gymnasium else "/verify", body)).json()
        except EnvironmentFailure as exc:
            if self._cohort > 1 and "ReadTimeout" in exc.message:  # the cohort never filled
                raise EnvironmentFailure(
                    f"needs_cohort: NeMo Gym server '{self.server}' grades {self._cohort} rollouts of a row "
                    f"together (its num_rollouts_per_prompt) and holds /verify until all have arrived",
                    hint=f"run {self._cohort} repeats of each row at once: --repeats {self._cohort} "
                         f"--concurrency {self._cohort} (or more)") from exc
            raise
        state.verified = True
        # how the server's episode went: its steps as the server answered them
        episode = {} if ep is None else {"nemo_gym_episode": {"env_id": ep.env_id, "steps": ep.steps, "done": ep.done}}
        return verify_verdict(answer, trajectory, sent=body, first={"nemo_gym_server": self.server,
                              "nemo_gym_model": self.judge}, last=episode,
                              missing=f"NeMo Gym server '{self.server}' answered /verify without a reward")

    async def close(self, state: NemoSession) -> None:
        if not state.verified:  # its rollout index is free again, for the retry of this rollout
            self._slots.get(state.task.id, set()).discard(state.slot)
        if state.episode is not None and not state.episode.closed:  # a rollout that never reached verify
            with contextlib.suppress(httpx.HTTPError):
                await state.client.post("/close", json={"env_id": state.episode.env_id})
        await state.client.aclose()


def agent_verdict(server: str, trajectory: Trajectory) -> Verdict:
    """The verdict of a row NeMo Gym's agent ran: the reward of the verify response its /run answered."""
    return verify_verdict(getattr(trajectory, AGENT_RUN_KEY, None), trajectory, sent=("response",),
                          first={"nemo_gym_server": server, "nemo_gym_agent": getattr(trajectory, "harness", None)},
                          missing=f"NeMo Gym server '{server}': the row was run by NeMo Gym's agent, whose /run "
                                  "answer (the verify response) the trajectory lacks")


def verify_verdict(answer: Any, trajectory: Trajectory, *, sent: Any, first: dict[str, Any],
                   last: dict[str, Any] | None = None, missing: str) -> Verdict:
    """The verdict of a NeMo Gym verify response (from /verify, or relayed by its agent's /run): its reward,
    and in the metadata ``first``, what it answered beyond what was ``sent`` (keys) and its reward, ``last``.
    A response without a numeric reward is an infrastructure failure (``missing``), never a 0."""
    reward = answer.get("reward") if isinstance(answer, dict) else None
    if not isinstance(reward, (int, float)) or isinstance(reward, bool):
        raise EnvironmentFailure(missing)
    assert isinstance(answer, dict)
    extra = {k: v for k, v in answer.items() if k not in sent and k != "reward"}
    return Verdict(reward=float(reward), passed=float(reward) >= 1.0, metadata={**first, **extra, **(last or {})},
                   answer=trajectory.final_text() or None)


_EPISODE_PATHS = ("/seed_session", "/verify", "/reset", "/step", "/close")
_CLASSES: dict[str, type[NemoGymServerEnvironment]] = {}


def environment_class(server: str) -> type[NemoGymServerEnvironment]:
    """The environment class of ``nemo_gym:<server>`` (one per server and process, so a spec always
    resolves to the same class); a ConfigError when the wheel ships no such server."""
    cls = _CLASSES.get(server)
    if cls is None:
        if not server.isidentifier():
            raise ConfigError(f"'{server}' is not a NeMo Gym resources-server name")
        if not (server_dir(server, None) / "app.py").is_file():
            raise ConfigError(f"NeMo Gym ships no resources server '{server}'",
                              hint=f"its servers are the folders of {server_dir('', None)}")
        cls = type(f"NemoGym_{server}", (NemoGymServerEnvironment,),
                   {"name": f"{FAMILY}:{server}", "server": server, "__module__": __name__,
                    "description": f"NeMo Gym resources server '{server}', run as it is over HTTP"})
        _CLASSES[server] = cls
    return cls
