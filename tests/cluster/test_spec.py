"""``--cluster`` values, and the errors a user sees before any cluster is touched (no Ray needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from palaestra.cluster.driver import RayCollector, lost_attempt, resolved_env_specs
from palaestra.cluster.spec import ClusterSpec, parse_cluster
from palaestra.core.errors import ConfigError
from palaestra.core.records import Rollout, Task
from palaestra.rollout.config import RunConfig


@pytest.mark.parametrize(("value", "address", "loopback"), [
    ("ray:local", None, True),
    ("ray:auto", "auto", False),
    ("ray:127.0.0.1:6379", "127.0.0.1:6379", True),
    ("ray:10.0.0.5:6380", "10.0.0.5:6380", False),
    ("ray://head.cluster:10001", "ray://head.cluster:10001", False),
    ("ray://127.0.0.1:10001", "ray://127.0.0.1:10001", True),
])
def test_addresses(value: str, address: str | None, loopback: bool) -> None:
    spec = parse_cluster(value)
    assert spec.address == address and spec.loopback is loopback


def test_plain_ray_joins_ray_address_or_starts_a_private_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert parse_cluster("ray").local
    monkeypatch.setenv("RAY_ADDRESS", "10.1.2.3:6379")
    assert parse_cluster("ray").address == "10.1.2.3:6379"


def test_options_are_typed() -> None:
    spec = parse_cluster("ray:127.0.0.1:1?workers=4&env_replicas=3&worker_cpus=0.5&object_store_mb=64")
    assert spec == ClusterSpec(address="127.0.0.1:1", workers=4, env_replicas=3, worker_cpus=0.5, object_store_mb=64)


@pytest.mark.parametrize(("value", "says"), [
    ("dask:foo", "unknown cluster"),
    ("ray:nohost", "is not HOST:PORT"),
    ("ray:host:port", "is not HOST:PORT"),
    ("ray://", "needs HOST:PORT"),
    ("ray:local?wrokers=2", "unknown option 'wrokers'"),
    ("ray:local?workers=two", "not a number"),
    ("ray:local?workers=0", "must be positive"),
])
def test_bad_values_say_what_is_wrong_and_what_works(value: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says) as info:
        parse_cluster(value)
    assert "ray:HOST:PORT" in (info.value.hint or "")


def test_collector_refuses_a_config_without_cluster(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="needs cfg.cluster"):
        RayCollector(RunConfig(env="mcqa"), tmp_path, [])


def test_file_environments_travel_as_absolute_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from palaestra.envs import registry

    monkeypatch.chdir(Path(__file__).parents[1])
    monkeypatch.setitem(registry._ALIASES, "counter", "fixtures/counter_env.py:CounterEnv")
    tasks = [Task(id="a", env="counter", input="x"), Task(id="b", env="mcqa", input="y")]
    specs = resolved_env_specs(tasks)
    assert specs["mcqa"] == "palaestra.envs.mcqa.env:MCQA"
    assert specs["counter"] == f"{Path(__file__).parents[1] / 'fixtures' / 'counter_env.py'}:CounterEnv"


def test_a_lost_attempt_is_a_failure_never_a_score() -> None:
    task = Task(id="t1", env="mcqa", input="q", tags=["x"])
    record = lost_attempt(task, RunConfig(model="http://user:secret@h:1/v1"), 1, 2, 0.0, "worker 0 was lost")
    assert isinstance(record, Rollout)
    assert record.outcome.status == "failed" and record.outcome.kind == "agent" and record.reward is None
    assert (record.task_id, record.repeat, record.attempt, record.tags) == ("t1", 1, 2, ["x"])
    assert "secret" not in record.model


def test_local_is_worker_processes_on_this_machine() -> None:
    assert parse_cluster("local") == ClusterSpec(backend="local")  # workers: one per CPU, decided at run time
    assert parse_cluster("local?workers=2") == ClusterSpec(backend="local", workers=2)
    assert parse_cluster("ray:local").backend == "ray"


@pytest.mark.parametrize(("value", "says"), [
    ("local?workers=0", "must be positive"),
    ("local?workers=two", "not a number"),
    ("local?env_replicas=2", "not one of local's"),
])
def test_bad_local_values_say_what_is_wrong(value: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says) as info:
        parse_cluster(value)
    assert "local?workers=N" in (info.value.hint or "")
