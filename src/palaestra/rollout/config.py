"""One typed run config whose fields map 1:1 to ``eval run`` flags. Values come from defaults, then a
YAML file, then flags; ``sources`` remembers which, so ``palaestra config show`` can say."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from palaestra.core.errors import ConfigError

if TYPE_CHECKING:
    from palaestra.settings import Settings


class RunEntry(BaseModel):
    """One (dataset × agent × model) entry of a multi-entry run file; unset fields fall back to the run's."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(..., pattern=r"^[A-Za-z0-9_.-]+$", description="Entry label: prefixes its task ids.")
    input: str | None = None
    env: str | None = None
    limit: int | None = Field(None, ge=1)
    agent: str | None = None
    model: str | None = None


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    input: str | None = Field(None, description="Task file (JSONL or Parquet).")
    env: str | None = Field(None, description="Environment for rows that name none; alone: its bundled tasks.")
    limit: int | None = Field(None, ge=1, description="Use only the first N tasks.")
    repeats: int = Field(1, ge=1, description="Rollouts per task (K for pass@k).")
    concurrency: int = Field(64, ge=1, description="Rollouts in flight at once.")
    max_sessions: int | None = Field(None, ge=1, description="Sessions each environment holds at once (default: "
                                     "the environment's own cap, raised to --concurrency where that is the "
                                     "generic 10,000); a rollout that finds every session taken waits for one.")
    model: str = Field("local", description="local[:PATH] (the embedded CPU model, default) | scripted:POLICY | "
                                            "an OpenAI-compatible base URL.")
    model_name: str | None = Field(None, description="Model name sent to an OpenAI-compatible endpoint.")
    api_key_env: str = Field("OPENAI_API_KEY", description="Variable that holds the API key.")
    api_key_file: str | None = Field(None, description="File that holds the API key (wins over the variable).")
    agent: str = Field("tool", description="Harness for rows that name none.")
    out: str | None = Field(None, description="Run directory (default runs/<timestamp>-<env>).")
    temperature: float | None = Field(None, description="Sampling temperature override.")
    capture_tokens: bool = Field(False, description="Ask an OpenAI-compatible server (vLLM, SGLang) for token ids "
                                                    "and logprobs.")
    max_tokens: int | None = Field(None, ge=1, description="Max generated tokens per model call.")
    seed: int | None = Field(None, description="Sampling seed (sent to the model; repeat i uses seed+i). Unset: "
                             "the run picks one at random and records it in run.json, so `--seed N` repeats it.")
    tool_choice: Literal["auto", "required", "none"] | None = Field(
        None, description="tool_choice sent with every model request that offers tools (auto | required | none); "
                          "unset: the row's own or the server's default.")
    max_attempts: int = Field(3, ge=1, description="Attempts per (task, repeat) on infrastructure failure.")
    deadline_s: float = Field(600.0, gt=0, description="Deadline per rollout (model, tools and verify).")
    placement: str = Field("direct", description="Environment placement: direct (in-process host, fastest) | "
                           "inprocess (in-process ASGI app) | local (a process on 127.0.0.1) | ray (Ray actor "
                           "replicas; needs --cluster).")
    skip_invalid: bool = Field(False, description="Skip malformed task rows (listing them) instead of refusing.")
    min_coverage: float = Field(1.0, ge=0.0, le=1.0, description="Exit 3 (incomplete) when fewer than this share "
                                "of (task, repeat) slots were scored; a run with none scored exits 4 (failed).")
    max_rollouts: int = Field(10_000_000, ge=1, description="Refuse a run of more rollouts (tasks × repeats) than "
                              "this, before anything is allocated.")
    max_steps: int = Field(16, ge=1, description="Agent step limit.")
    models: dict[str, str] = Field(default_factory=dict, description="Named model specs (run file): rows, entries "
                                                                    "and routers may name them.")
    model_prices: dict[str, float] = Field(default_factory=dict, description="Price per million tokens by model "
                                                                             "name, for cost in metrics and compare.")
    entries: list[RunEntry] | None = Field(None, description="Several (dataset × agent × model) entries in one run "
                                                             "(run file only): one journal, metrics per entry.")
    cluster: str | None = Field(None, description="Run the rollouts in worker processes on this machine: local "
                                "or local?workers=N (one per CPU by default); or on a Ray cluster: ray | ray:local | "
                                "ray:auto | ray:HOST:PORT | ray://HOST:PORT, options ?workers=N&env_replicas=N; with "
                                "--placement ray the environment servers run as Ray actors too.")
    routes: dict[str, str] = Field(default_factory=dict, description="NeMo Gym agent names (a row's agent_ref) → "
                                   "environment; a NeMo Gym config file given as --config fills it.")
    # Run settings: also read from PALAESTRA_* variables (palaestra.settings), which a file or a flag overrides.
    sandbox: str | None = Field(None, description="Sandbox provider for tasks that name none: local | process | "
                                "docker | podman | apptainer | none (PALAESTRA_SANDBOX; default: local where "
                                "bubblewrap works, else process).")
    code_scoring: Literal["fraction", "all"] | None = Field(None, description="How `code` scores tasks that say "
                                                            "nothing: fraction | all (PALAESTRA_CODE_SCORING).")
    judge_model: str | None = Field(None, description="The judge of the `judge` environment: base URL, model spec "
                                    "or keyword (PALAESTRA_JUDGE_MODEL).")
    judge_model_name: str | None = Field(None, description="Model name sent to the judge (PALAESTRA_JUDGE_MODEL_NAME).")
    judge_api_key_env: str | None = Field(None, description="Variable holding the judge's API key "
                                          "(PALAESTRA_JUDGE_API_KEY_ENV; default OPENAI_API_KEY).")
    nemo_compat: bool | None = Field(None, description="Grade rows exactly as NeMo Gym 0.7's verifiers do, in "
                                     "every environment with that reading (docs/nemo_gym_parity.md); a row's "
                                     "metadata.nemo_compat overrides it.")
    run_id: str | None = Field(None, description="Set by the runtime from run.json: labels what the run's sandboxes "
                               "and servers create, so runs in one process or machine stay apart.")


RUN_SETTINGS = ("sandbox", "code_scoring", "judge_model", "judge_model_name", "judge_api_key_env")


def effective_settings(cfg: RunConfig, sources: dict[str, str] | None, settings: Settings | None = None, *,
                       envs: list[type[Any]] | None = None) -> dict[str, dict[str, Any]]:
    """What run.json records under ``settings``: every setting with its value and source (default, env
    VAR, file PATH, flag), secrets redacted. The run settings come from ``cfg`` (they may have been
    overridden by a file or a flag); the machine settings from ``settings``. When the run leaves the
    sandbox unset and one of ``envs`` takes a ``sandbox``, the provider this machine defaults to is
    recorded, so run.json says what graded."""
    from palaestra.core.secrets import redact

    out: dict[str, dict[str, Any]] = dict(settings.effective()) if settings is not None else {}
    given = redact({name: getattr(cfg, name) for name in RUN_SETTINGS})
    for name in RUN_SETTINGS:
        out[name] = {"value": given[name], "source": (sources or {}).get(name, "run config")}
    takes_sandbox = any("sandbox" in inspect.signature(cls).parameters for cls in envs or [])
    if cfg.sandbox is None and takes_sandbox:
        from palaestra.sandbox.providers import default_provider_name

        out["sandbox"] = {"value": default_provider_name(), "source": "default (this machine)"}
    return out


def env_options(cfg: RunConfig) -> dict[str, Any]:
    """Constructor arguments for the run's environments (each takes those its ``__init__`` names).

    Built from the run's config alone, so a Ray worker or an environment process gets the same ones."""
    options: dict[str, Any] = {
        "sandbox": cfg.sandbox, "scoring": cfg.code_scoring, "judge": cfg.judge_model,
        "judge_model_name": cfg.judge_model_name, "judge_api_key_env": cfg.judge_api_key_env,
        "run_id": cfg.run_id, "nemo_compat": cfg.nemo_compat,
    }
    return {k: v for k, v in options.items() if v is not None}


def load_yaml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file not found: {p}")
    import yaml  # only a run file needs it; `eval run` with flags alone starts without it

    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: the top level must be a mapping of run options")
    from palaestra.adapters import nemo_gym_families

    if nemo_gym_families.is_nemo_config(data):
        return _nemo_config_values(p, data)
    return {k.replace("-", "_"): v for k, v in data.items()}


def _nemo_config_values(path: Path, data: dict[str, Any]) -> dict[str, Any]:
    """A NeMo Gym config file (resources servers, agents, models) as run options: its routing, i.e. each
    agent instance → the resources server it names, so rows whose ``agent_ref`` names that agent run in
    that family's environment. Everything else in it (ports, model servers, dataset paths) describes
    NeMo Gym's own processes and has no Palaestra counterpart; a config that routes nothing is refused."""
    from palaestra.adapters import nemo_gym_families

    routes = nemo_gym_families.routes_from_nemo_config(data)
    if not routes:
        raise ConfigError(f"{path}: a NeMo Gym config that defines no resources server or agent to route rows to",
                          hint="give the config of the resources server and its agent (resources_servers/"
                               "<name>/configs/<name>.yaml)")
    return {"routes": routes}


def resolve(flags: dict[str, Any], config_file: str | None = None,
            settings: Settings | None = None) -> tuple[RunConfig, dict[str, str]]:
    """Merge defaults < variables (``settings``' run settings) < file < flags (a flag left at None does
    not override)."""
    sources = {name: "default" for name in RunConfig.model_fields}
    values: dict[str, Any] = {}
    if settings is not None:
        for name in settings.RUN_FIELDS:
            value = getattr(settings, name)
            if value is not None:
                values[name] = value
                sources[name] = settings.source(name)
    if config_file:
        file_values = load_yaml(config_file)
        unknown = sorted(set(file_values) - set(RunConfig.model_fields))
        if unknown:
            raise ConfigError(f"{config_file}: unknown option(s) {', '.join(unknown)}",
                              hint=f"known: {', '.join(RunConfig.model_fields)}")
        values.update(file_values)
        sources.update({k: f"file {config_file}" for k in file_values})
    for k, v in flags.items():
        if v is not None:
            values[k] = v
            sources[k] = "flag"
    try:
        return RunConfig.model_validate(values), sources
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in exc.errors())
        named = sorted({"--" + str(e["loc"][0]).replace("_", "-") for e in exc.errors() if e["loc"]})
        raise ConfigError(f"invalid run config: {problems}",
                          hint=f"check {', '.join(named)} (or the run file's field)" if named else None) from None
