"""Suite-wide plumbing: the ``fuzz`` gate and the ``PALAESTRA_REQUIRE`` switch.

**Skips name a capability.** A test skips only when something the machine lacks is missing (a binary, a
package, root, model weights), decided *before* the product runs, and its reason starts with the name of
that capability: ``pytest.skip("docker: no engine can start here")``. The names are ``CAPABILITIES``.

**PALAESTRA_REQUIRE** turns such skips into failures, so a machine that is meant to have a capability
cannot quietly lose it (a broken install reads as a test failure, not as a skip):

* ``PALAESTRA_REQUIRE=all``: every skip fails;
* ``PALAESTRA_REQUIRE=all,-podman,-apptainer``: every skip fails but those of the capabilities named with
  a ``-`` (what CI does not install);
* ``PALAESTRA_REQUIRE=docker,browser``: skips for those capabilities fail;
* ``PALAESTRA_REQUIRE_BROWSER=1`` (older spelling) adds ``browser``.

Whenever the switch is set, a skip whose reason names no known capability fails as well: it cannot be told
apart from a required one.

The long ``fuzz`` variants are *deselected* unless asked for, not skipped: they are not a capability the
machine lacks, so the switch leaves them alone.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).parent / "fixtures"

# Capability name -> what provides it. A skip reason starts with "<name>: ".
CAPABILITIES: dict[str, str] = {
    "local": "the `local` sandbox provider: bubblewrap that can create namespaces (.ci/setup-sandbox.sh)",
    "process": "the `process` sandbox provider (any POSIX system)",
    "docker": "dockerd, runc and the test image (.ci/setup-sandbox.sh)",
    "podman": "podman and runc (.ci/setup-sandbox.sh; the tests import their image)",
    "gvisor": "gVisor's runsc, run as root, registered with the tests' dockerd (.ci/setup-sandbox.sh)",
    "apptainer": "apptainer and an image with python3 (PALAESTRA_TEST_APPTAINER_IMAGE)",
    "busybox": "busybox-static (.ci/setup-sandbox.sh)",
    "netns": "network namespaces for the external CLIs' jail (root, iproute2)",
    "tmpfs": "mounting a tmpfs (root on Linux)",
    "agents": "the external coding-agent CLIs (.ci/setup-agents.sh)",
    "slurm": "Slurm and munge, run as root (.ci/setup-cluster.sh)",
    "ray": "the [ray] extra",
    "browser": "Chromium and the playwright package (.ci/setup-browser.sh, the [dev] extra)",
    "local-model": "the [local] extra and the default local model's weights",
    "trl": "the [trl] extra (TRL's GRPOTrainer)",
    "verl": "the [verl] extra and VeRL itself (`pip install --no-deps verl==0.9.1`, as .ci/run does)",
    "skyrl": "the [skyrl] extra (skyrl-gym)",
    "nemo-gym": "a NeMo Gym install (.ci/setup-nemo-gym.sh)",
    "peers": "the side-by-side bench's peers, Inspect AI, verifiers 0.3 and lm-eval, in side venvs "
             "(.ci/setup-peers.sh)",
    "langgraph": "the [langgraph] extra",
    "sdk": "the [sdk] extra (openai-agents, smolagents, strands-agents)",
    "reasoning-gym": "the [reasoning] extra",
    "pyarrow": "the [parquet] extra",
    "openenv": "the [openenv] extra",
    "verifiers": "the [verifiers] extra (Python >= 3.11)",
    "verifiers-v1": "verifiers 0.4 (the v1 API) in a side venv (.ci/setup-verifiers.sh)",
    "aviary": "the [aviary] extra (fhaviary; Python >= 3.11)",
    "openai": "the openai package (the [dev] extra)",
    "mlflow": "the [mlflow] extra",
    "wandb": "the [wandb] extra",
    "python3.11": "Python >= 3.11",
    "valgrind": "valgrind, which bench/instructions.py counts instructions with (.ci/setup-bench.sh)",
}


_PROCESS_ENVIRON = os.environ


@pytest.fixture(autouse=True)
def _process_environ_kept(request: pytest.FixtureRequest) -> Generator[None, None, None]:
    """``datasets``' ``map(num_proc=...)`` (VeRL's dataset load goes through it) replaces ``os.environ`` with a
    copy; whatever bound the original at import (rich's Console reads ``COLUMNS`` from it) then stops seeing
    changes. After each test, the process's own mapping is put back, holding what the copy held."""
    yield
    if os.environ is not _PROCESS_ENVIRON:
        import warnings

        warnings.warn(f"{request.node.nodeid} left os.environ replaced by a {type(os.environ).__name__}; "
                      "the original is put back", stacklevel=1)
        current = dict(os.environ)
        for key in set(_PROCESS_ENVIRON) - set(current):
            del _PROCESS_ENVIRON[key]
        _PROCESS_ENVIRON.update(current)
        os.environ = _PROCESS_ENVIRON  # noqa: B003 (the original object back, its contents already set)


@pytest.fixture(scope="session")
def local_model_path() -> Path:
    """The default local model's weights (SmolLM2), or a skip naming what is missing: a module of the
    [local] extra, or the weights (a CI machine fetches them in .ci/run)."""
    for module in ("torch", "transformers", "gguf", "llguidance"):
        pytest.importorskip(module, reason=f"local-model: {module} is not installed (the [local] extra)")
    from palaestra.core.errors import ConfigError
    from palaestra.models.local.weights import resolve

    try:
        return Path(resolve(None, pull=True, notify=lambda _: None).path)
    except ConfigError as exc:
        pytest.skip(f"local-model: the default local model's weights are unavailable: {exc}")


@pytest.fixture
def counter_spec() -> str:
    return f"{FIXTURES / 'counter_env.py'}:CounterEnv"


# ---- the `fuzz` marker: long variants (minutes each), deselected unless asked for -----------------------
# Deselected here rather than through addopts, so a user's own `-m` expression keeps working.
def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-fuzz", action="store_true", default=False,
                     help="run the long `fuzz` variants (also PALAESTRA_FUZZ=1, or a -m expression naming fuzz)")


def fuzz_enabled(config: pytest.Config) -> bool:
    return (bool(config.getoption("--run-fuzz", default=False))
            or os.environ.get("PALAESTRA_FUZZ", "") not in ("", "0")
            or "fuzz" in (config.getoption("markexpr", default="") or ""))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The default run stays short: long variants run only when asked for (see ``fuzz_enabled``)."""
    if fuzz_enabled(config):
        return
    long_ones = [item for item in items if item.get_closest_marker("fuzz") is not None]
    if long_ones:
        items[:] = [item for item in items if item.get_closest_marker("fuzz") is None]
        config.hook.pytest_deselected(items=long_ones)


# ---- PALAESTRA_REQUIRE: a skip of a required capability is a failure ------------------------------------
@dataclass(frozen=True)
class Requirement:
    """What PALAESTRA_REQUIRE asks for: ``all`` (less ``excluded``), or the ``included`` names."""

    all: bool
    included: frozenset[str]
    excluded: frozenset[str]

    def why_failed(self, capability: str | None) -> str | None:
        """Why a skip for ``capability`` fails, or ``None`` when it may stay a skip."""
        if capability is None:  # cannot be told apart from a required capability
            return ("PALAESTRA_REQUIRE is set and this skip names no known capability (start its reason "
                    f"with one of: {', '.join(CAPABILITIES)})")
        if (self.all and capability not in self.excluded) or capability in self.included:
            return f"capability '{capability}' is required (PALAESTRA_REQUIRE) but missing"
        return None


def required_capabilities(environ: Mapping[str, str] = os.environ) -> Requirement | None:
    """Parse ``PALAESTRA_REQUIRE`` (``all``, ``all,-podman``, ``docker,browser``); ``None`` when unset."""
    names = [n.strip().lower() for n in environ.get("PALAESTRA_REQUIRE", "").split(",") if n.strip()]
    if environ.get("PALAESTRA_REQUIRE_BROWSER", "") not in ("", "0"):
        names.append("browser")
    if not names:
        return None
    included = frozenset(n for n in names if n != "all" and not n.startswith("-"))
    excluded = frozenset(n[1:] for n in names if n.startswith("-"))
    unknown = (included | excluded) - set(CAPABILITIES)
    if unknown:
        raise pytest.UsageError(f"PALAESTRA_REQUIRE names unknown capabilities {sorted(unknown)}; "
                                f"known: all, {', '.join(CAPABILITIES)} (and -NAME after all to leave one out)")
    return Requirement(all="all" in names, included=included - excluded, excluded=excluded)


def skip_capability(reason: str) -> str | None:
    """The capability a skip reason names (its text before the first ':'), when it is a known one."""
    head = reason.removeprefix("Skipped: ").split(":", 1)[0].strip().lower()
    return head if head in CAPABILITIES else None


def _skip_reason(longrepr: Any) -> str:
    text = str(longrepr[2]) if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return text.removeprefix("Skipped: ")


def _enforce(report: pytest.TestReport | pytest.CollectReport, required: Requirement | None) -> None:
    """Turn ``report`` from skipped into failed when the skipped capability is required."""
    if required is None or not report.skipped or hasattr(report, "wasxfail"):
        return
    reason = _skip_reason(report.longrepr)
    why = required.why_failed(skip_capability(reason))
    if why is not None:
        report.outcome = "failed"
        report.longrepr = f"{why}: {reason}"


_REQUIRED = pytest.StashKey[Requirement | None]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_REQUIRED] = required_capabilities()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    _enforce(report, item.config.stash.get(_REQUIRED, None))
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, Any]:
    """A whole module skipped at import (``pytest.importorskip`` at module level) counts too."""
    report = yield
    _enforce(report, collector.config.stash.get(_REQUIRED, None))
    return report
