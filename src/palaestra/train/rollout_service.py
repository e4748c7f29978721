"""``RolloutService``: the trainer-facing front that mounts environments, builds the policy backend and
runs jobs (see ``service.Job`` for the scheduling guarantees). One service may run many jobs; the
environments it mounts are shared between them."""

from __future__ import annotations

import asyncio

from palaestra.core.errors import ConfigError, PalaestraError
from palaestra.core.secrets import redact_url
from palaestra.models.base import ModelBackend
from palaestra.placement import PLACEMENTS, MountedEnv, mount_env
from palaestra.server.security import url_host_allowed
from palaestra.train.continuation import ContinuationBackend
from palaestra.train.service import Job
from palaestra.train.service_types import JobSpec, PolicyEndpoint


def make_policy_backend(policy: PolicyEndpoint) -> ModelBackend:
    """An OpenAI-compatible client for the trainer's endpoint, asking for token ids when told to."""
    from palaestra.models.factory import TOKEN_CAPTURE_FIELDS
    from palaestra.models.openai_http import OpenAIBackend
    from palaestra.settings import variable

    key = variable(policy.api_key_env) if policy.api_key_env else None
    backend: ModelBackend = OpenAIBackend(policy.base_url, model=policy.model, api_key=key, timeout=policy.timeout_s,
                                          max_concurrency=policy.max_concurrency,
                                          extra_body=dict(TOKEN_CAPTURE_FIELDS) if policy.capture_tokens else None)
    return ContinuationBackend(backend) if policy.continue_tokens else backend


class RolloutService:
    """``policy_hosts``: the hosts (``name`` or ``name:port``) a job's policy endpoint may be on, besides
    loopback, which is always allowed. Any other address is refused, so whoever can submit a job cannot
    make the service call arbitrary addresses with its keys (no open relay)."""

    def __init__(self, *, policy_hosts: tuple[str, ...] = ()) -> None:
        self.policy_hosts = policy_hosts
        self.jobs: dict[str, Job] = {}
        self._envs: dict[tuple[str, str], MountedEnv] = {}
        self._lock = asyncio.Lock()

    async def _mount(self, name: str, placement: str) -> MountedEnv:
        async with self._lock:
            key = (name, placement)
            if key not in self._envs:
                self._envs[key] = await mount_env(name, placement)
            return self._envs[key]

    async def submit(self, spec: JobSpec, *, backend: ModelBackend | None = None, with_reference: bool = False) -> Job:
        """Start a job. ``backend`` (Python API only) replaces the HTTP client of ``spec.policy``, e.g. a
        ``TrainableLocalBackend`` sharing the trainer's weights; it stays the caller's to close.
        ``with_reference`` (Python API only): each rollout fetches its task's reference first, for a
        scripted oracle ``backend`` (``palaestra.collect(model="scripted:oracle")``)."""
        if backend is None and spec.policy is None:
            raise ConfigError("the job names no policy endpoint and was given no backend",
                              hint="set policy.base_url (the trainer's inference server)")
        if backend is None and spec.policy is not None and not url_host_allowed(spec.policy.base_url,
                                                                               self.policy_hosts):
            raise ConfigError(f"policy endpoint {redact_url(spec.policy.base_url)!r} is not on this service's "
                              "allow-list", hint="use a loopback endpoint, or start the service with --policy-host "
                                                 "HOST for that host")
        if spec.placement not in PLACEMENTS:
            raise ConfigError(f"unknown placement {spec.placement!r}", hint=f"use one of {', '.join(PLACEMENTS)}")
        nameless = [t.id for t in spec.tasks if not t.env]
        if nameless:
            raise ConfigError(f"task(s) {', '.join(nameless[:5])} name no environment",
                              hint="set each task's 'env' (a built-in name or a module:Class spec)")
        envs = {name: await self._mount(name, spec.placement) for name in sorted({t.env for t in spec.tasks})}
        if backend is None:
            assert spec.policy is not None  # checked above
            backend = make_policy_backend(spec.policy)
            owned = True
        else:
            owned = False
        job = Job(spec, envs, backend, owns_backend=owned,
                  with_reference=with_reference)
        self.jobs[job.id] = job
        return job

    def job(self, job_id: str) -> Job:
        try:
            return self.jobs[job_id]
        except KeyError:
            raise PalaestraError(f"no job {job_id!r}", kind="unknown_job",
                                 hint="use the job_id POST /jobs answered; finished jobs stay until deleted") from None

    async def forget(self, job_id: str) -> None:
        """Cancel a job (if running) and drop it."""
        job = self.job(job_id)
        await job.cancel()
        self.jobs.pop(job_id, None)

    async def aclose(self) -> None:
        for job in list(self.jobs.values()):
            await job.cancel()
        self.jobs.clear()
        for mounted in self._envs.values():
            await mounted.stop()
        self._envs.clear()
