"""One typed run config whose fields map 1:1 to ``eval run`` flags. Values come from defaults, then a
YAML file, then flags; ``sources`` remembers which, so ``palaestra config show`` can say."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from palaestra.core.errors import ConfigError


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
    seed: int | None = Field(None, description="Sampling seed (sent to the model; repeat i uses seed+i).")
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
    cluster: str | None = Field(None, description="Run the rollouts on a Ray cluster: ray | ray:local | ray:auto | "
                                "ray:HOST:PORT | ray://HOST:PORT, options ?workers=N&env_replicas=N; with "
                                "--placement ray the environment servers run as Ray actors too.")


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
    return {k.replace("-", "_"): v for k, v in data.items()}


def resolve(flags: dict[str, Any], config_file: str | None = None) -> tuple[RunConfig, dict[str, str]]:
    """Merge defaults < file < flags (a flag left at None does not override)."""
    sources = {name: "default" for name in RunConfig.model_fields}
    values: dict[str, Any] = {}
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
        raise ConfigError(f"invalid run config: {problems}") from None
