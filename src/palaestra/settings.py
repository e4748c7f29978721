"""Every environment variable Palaestra reads, as one typed object read once at the edge.

The CLI's root callback and the public API call :meth:`Settings.from_env`; everything below them gets
the values it needs as arguments (``RunConfig`` fields, constructor arguments of environments,
sandboxes and models). No other module of the library reads ``os.environ`` except where a child
process's environment is built, so what a run used is what its ``run.json`` says (``settings``) and what
``palaestra config show`` prints, each value with where it came from.

Two kinds of setting live here:

* run settings (``RUN_FIELDS``): they change what a run does (which sandbox grades, how code is scored,
  which judge). Each is also a ``RunConfig`` field, so it has an ``eval run`` flag and a run-file field;
  precedence is default < variable < run file < flag.
* machine settings: where this machine keeps its tools and state (the bubblewrap binary, the sandbox
  state directory, the agents directory, a server's token). They describe the host, not the run.

Variables named by the user's own config (``api_key_env``, ``--token-env``) are read with :func:`variable`,
the one sanctioned reader for a variable whose name is itself a setting."""

from __future__ import annotations

import contextlib
import contextvars
import os
import re
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

from pydantic import AliasChoices, Field, PrivateAttr, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from palaestra.core.secrets import redact

_BIN_VAR = re.compile(r"^PALAESTRA_([A-Z0-9_]+)_BIN$")
# Set while from_env validates values it has already read: the settings sources then take only those.
_GIVEN_ONLY: contextvars.ContextVar[bool] = contextvars.ContextVar("palaestra_settings_given_only", default=False)


def _var(name: str) -> Any:
    """The variable a field reads (also accepted under the field's own name when built in code)."""
    return AliasChoices(name)


class Settings(BaseSettings):
    """Palaestra's settings from the environment. Empty variables count as unset."""

    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True, frozen=True)

    # ---- run settings (also RunConfig fields) -------------------------------------------------------
    sandbox: str | None = Field(None, validation_alias=_var("PALAESTRA_SANDBOX"),
                                description="Sandbox provider for tasks that name none: local | process | docker "
                                            "| podman | apptainer | none (default: local where bubblewrap works, "
                                            "else process).")
    code_scoring: str | None = Field(None, validation_alias=_var("PALAESTRA_CODE_SCORING"),
                                     description="How `code` scores tasks that say nothing: fraction (default) | "
                                                 "all.")
    judge_model: str | None = Field(None, validation_alias=_var("PALAESTRA_JUDGE_MODEL"),
                                    description="The `judge` environment's judge: an OpenAI-compatible base URL, a "
                                                "model spec, or keyword.")
    judge_model_name: str | None = Field(None, validation_alias=_var("PALAESTRA_JUDGE_MODEL_NAME"),
                                         description="Model name sent to the judge endpoint.")
    judge_api_key_env: str | None = Field(None, validation_alias=_var("PALAESTRA_JUDGE_API_KEY_ENV"),
                                          description="Variable holding the judge's API key (OPENAI_API_KEY).")

    # ---- machine settings ---------------------------------------------------------------------------
    docker_image: str | None = Field(None, validation_alias=_var("PALAESTRA_DOCKER_IMAGE"),
                                     description="Image for docker/podman sandboxes whose task names none.")
    docker_pull: str | None = Field(None, validation_alias=_var("PALAESTRA_DOCKER_PULL"),
                                    description="Image pull policy: never (default) | missing | always.")
    docker_user: str = Field("65534:65534", validation_alias=_var("PALAESTRA_DOCKER_USER"),
                             description="uid:gid that container sandboxes run as.")
    docker_bin: str | None = Field(None, validation_alias=_var("PALAESTRA_DOCKER"),
                                   description="The docker executable (default: docker on PATH).")
    podman_bin: str | None = Field(None, validation_alias=_var("PALAESTRA_PODMAN"),
                                   description="The podman executable (default: podman on PATH).")
    apptainer_bin: str | None = Field(None, validation_alias=_var("PALAESTRA_APPTAINER"),
                                      description="The apptainer executable (default: apptainer or singularity).")
    bwrap_bin: str | None = Field(None, validation_alias=_var("PALAESTRA_BWRAP"),
                                  description="The bubblewrap executable of the local sandbox (default: bwrap).")
    sandbox_state: str | None = Field(None, validation_alias=_var("PALAESTRA_SANDBOX_STATE"),
                                      description="Where sandbox records and box directories live (default: "
                                                  "/run/palaestra, $XDG_RUNTIME_DIR/palaestra or "
                                                  "/tmp/palaestra-UID).")
    sandbox_uids: str | None = Field(None, validation_alias=_var("PALAESTRA_SANDBOX_UIDS"),
                                     description="Range of dedicated sandbox uids, LO-HI (61000-63999).")
    agents_dir: str | None = Field(None, validation_alias=_var("PALAESTRA_AGENTS_DIR"),
                                   description="Where coding-agent CLIs are installed (/opt/palaestra-agents).")
    agent_bins: dict[str, str] = Field(default_factory=dict,
                                       description="PALAESTRA_<AGENT>_BIN: the executable of one agent CLI, by the "
                                                   "variable's name.")
    cache: str | None = Field(None, validation_alias=_var("PALAESTRA_CACHE"),
                              description="Cache directory of local model weights (~/.cache/palaestra).")
    token: str | None = Field(None, validation_alias=_var("PALAESTRA_TOKEN"),
                              description="Bearer token of the servers Palaestra starts (env, model, rollouts).")
    view_token: str | None = Field(None, validation_alias=_var("PALAESTRA_VIEW_TOKEN"),
                                   description="Bearer token of `palaestra view`.")
    runtime_dir: str | None = Field(None, validation_alias=_var("XDG_RUNTIME_DIR"),
                                    description="The user's runtime directory (token files, sandbox state).")
    ray_address: str | None = Field(None, validation_alias=_var("RAY_ADDRESS"),
                                    description="Address of a running Ray cluster for --cluster ray.")
    mlflow_tracking_uri: str | None = Field(None, validation_alias=_var("MLFLOW_TRACKING_URI"),
                                            description="MLflow tracking URI of the mlflow exporter.")

    # The fields that are also RunConfig fields (same name there).
    RUN_FIELDS: ClassVar[tuple[str, ...]] = ("sandbox", "code_scoring", "judge_model", "judge_model_name",
                                             "judge_api_key_env")

    _sources: dict[str, str] = PrivateAttr(default_factory=dict)

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings],
                                   init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource,
                                   dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource,
                                   ) -> tuple[PydanticBaseSettingsSource, ...]:
        """``Settings()`` reads the process environment; ``from_env`` (which tracks sources) reads it itself.
        No dotenv or secrets directory: a value comes from a variable, the run, or the default."""
        return (init_settings,) if _GIVEN_ONLY.get() else (init_settings, env_settings)

    @field_validator("sandbox", "code_scoring", "docker_pull", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    @classmethod
    def variable_of(cls, field: str) -> str | None:
        """The environment variable behind ``field`` (None for ``agent_bins``, which is a family)."""
        alias = cls.model_fields[field].validation_alias
        return str(alias.choices[0]) if isinstance(alias, AliasChoices) else None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read the settings from ``environ`` (the process environment by default): the only read of it."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        sources: dict[str, str] = {}
        for name in cls.model_fields:
            var = cls.variable_of(name)
            if var and env.get(var, "").strip():
                values[name] = env[var]
                sources[name] = f"env {var}"
        bins = {k: v for k, v in env.items() if _BIN_VAR.match(k) and v.strip()}
        if bins:
            values["agent_bins"] = bins
            sources["agent_bins"] = "env " + ", ".join(sorted(bins))
        token = _GIVEN_ONLY.set(True)
        try:
            settings = cls(**values)
        finally:
            _GIVEN_ONLY.reset(token)
        settings._sources = sources
        return settings

    def source(self, field: str) -> str:
        """Where ``field``'s value came from: ``default`` or ``env VAR``."""
        return self._sources.get(field, "default")

    def effective(self) -> dict[str, dict[str, Any]]:
        """Every setting with its value and source, secrets redacted: what run.json and ``config show`` show."""
        values = redact(self.model_dump(mode="json"))
        return {name: {"value": values[name], "source": self.source(name)} for name in type(self).model_fields}


def machine(given: Settings | None = None) -> Settings:
    """``given`` when the caller has one, else the machine settings as the process environment says now.

    Run settings always come down from the edge as arguments; this is for the places that describe the
    host rather than a run (which bubblewrap binary a provider probes, where sandbox state lives, where
    agent CLIs are installed) when they are reached without a :class:`Settings` (a provider probed by
    ``palaestra sandbox ls``, a server process that inherited its parent's environment)."""
    return given if given is not None else Settings.from_env()


def variable(name: str) -> str | None:
    """The value of a variable whose *name* is a setting (``api_key_env``, ``--token-env``), or None."""
    return os.environ.get(name, "").strip() or None


def child_environ(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The parent's environment plus ``extra``: for a child process that should see what we see."""
    return {**os.environ, **(extra or {})}


@contextlib.contextmanager
def scoped_variables(values: Mapping[str, str]) -> Iterator[None]:
    """Set variables that are absent for the length of a block, then remove them again.

    Only for third-party libraries that take an option from the environment alone (MLflow's
    ``MLFLOW_ALLOW_FILE_STORE``, OpenBLAS's thread count at numpy's import); never a Palaestra setting,
    and nothing outlives the block."""
    added = {k: v for k, v in values.items() if k not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)


def has_variable(name: str) -> bool:
    """Whether ``name`` is set at all (for a library option that counts when present, even empty)."""
    return name in os.environ


def export_to_children(values: Mapping[str, str]) -> dict[str, str]:
    """Set variables that are absent, for a library whose *child processes* must inherit them and which
    takes them from nowhere else (Ray: the token of a private cluster reaches its raylets and workers only
    this way). Returns what was set. Never a Palaestra setting: those travel as arguments."""
    added = {k: v for k, v in values.items() if k not in os.environ}
    os.environ.update(added)
    return added
