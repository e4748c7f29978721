"""The plugin registry in one process, against real distributions on ``sys.path`` (a ``.dist-info``
directory is what ``importlib.metadata`` reads; nothing is mocked): entry points are found lazily, a
built-in wins over an entry point of the same name, a broken plugin fails with its origin named, and a
model backend from a package is built through ``make_backend``."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from palaestra.core.errors import ConfigError
from palaestra.plugins import registry as plugins
from palaestra.plugins.registry import GROUPS, PluginRegistry, registry, rescan


def _dist(site: Path, name: str, version: str, entry_points: str, modules: dict[str, str]) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))
    for module, source in modules.items():
        (site / f"{module}.py").write_text(textwrap.dedent(source))


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Path]:
    """A directory on sys.path holding two small distributions; the entry-point cache is reset around
    the test so other tests see the process as it was."""
    site = tmp_path / "site"
    _dist(site, "acme-plugins", "1.2.0", """
        [palaestra.models]
        echoplug = acme_models:make

        [palaestra.environments]
        mcqa = acme_models:NotReallyMCQA
        broken = acme_missing_module:Env

        [palaestra.exporters]
        shout = acme_models:shout
    """, {"acme_models": """
        from palaestra.models.scripted import ScriptedBackend

        SEEN = []

        def make(spec, **settings):
            SEEN.append((spec.kind, spec.name, dict(spec.options), settings["seed"]))
            return ScriptedBackend("constant", constant_text=spec.name)

        def shout(run_dir, *, loud: bool = False, times: int = 1):
            return ("HEY" if loud else "hey") * times

        class NotReallyMCQA:
            pass
    """})
    _dist(site, "zeta-plugins", "0.1", """
        [palaestra.models]
        echoplug = zeta_models:make
    """, {"zeta_models": "def make(spec, **settings):\n    raise AssertionError('the first distribution wins')\n"})
    sys.path.insert(0, str(site))
    rescan()
    try:
        yield site
    finally:
        sys.path.remove(str(site))
        for mod in ("acme_models", "zeta_models"):
            sys.modules.pop(mod, None)
        rescan()


def test_lookups_of_built_ins_never_scan_installed_distributions() -> None:
    rescan()
    reg = registry("environments")
    mcqa = reg.get("mcqa")
    assert mcqa is not None and mcqa.origin == "built-in"
    assert plugins._EP_CACHE is None, "a built-in lookup read the entry points"
    reg.names()
    assert plugins._EP_CACHE is not None


def test_a_model_backend_from_an_installed_package(site: Path) -> None:
    from palaestra.models.factory import make_backend

    backend = make_backend("echoplug:hello?x=1", seed=9)
    import acme_models

    assert acme_models.SEEN == [("echoplug", "hello", {"x": "1"}, 9)]
    assert backend.constant_text == "hello"  # type: ignore[attr-defined]
    listed = [p for p in registry("models").plugins() if p.name == "echoplug"]
    assert [(p.distribution, p.version, p.shadowed_by) for p in listed] == [
        ("acme-plugins", "1.2.0", None), ("zeta-plugins", "0.1", "acme-plugins 1.2.0")]


def test_a_built_in_wins_over_an_entry_point_of_the_same_name(site: Path) -> None:
    from palaestra.envs.registry import load_env_class

    assert load_env_class("mcqa").__module__ == "palaestra.envs.mcqa.env"
    rows = [p for p in registry("environments").plugins() if p.name == "mcqa"]
    assert [(p.origin, p.shadowed_by) for p in rows] == [("built-in", None), ("acme-plugins", "built-in")]
    assert registry("environments").names().count("mcqa") == 1


def test_a_broken_plugin_names_itself_and_its_distribution(site: Path) -> None:
    from palaestra.envs.registry import load_env_class

    with pytest.raises(ConfigError) as info:
        registry("environments").load("broken")
    assert "'broken'" in info.value.message and "acme-plugins 1.2.0" in info.value.message
    assert "ModuleNotFoundError" in info.value.message
    with pytest.raises(ConfigError, match="unknown environment 'broken'"):
        load_env_class("broken")


def test_an_exporter_plugin_gets_typed_options(site: Path, tmp_path: Path) -> None:
    from palaestra.report.exporters import export_run

    assert export_run("shout?loud=1&times=2", tmp_path) == "HEYHEY"
    with pytest.raises(ConfigError, match="option times='x' is not an integer"):
        export_run("shout?times=x", tmp_path)


def test_registered_plugins_and_unknown_names() -> None:
    reg = PluginRegistry("agents")
    reg.add_builtins({"tool": "palaestra.agents.tool_agent:ToolAgent"})
    sentinel = object()
    reg.register("mine", sentinel)
    reg.register("tool", "not.used:Thing")
    tool = reg.get("tool")
    assert reg.load("mine") is sentinel and tool is not None and tool.origin == "built-in"
    reg.unregister("mine")
    with pytest.raises(ConfigError, match="unknown agent 'mine'") as info:
        reg.load("mine")
    assert "palaestra.agents" in (info.value.hint or "") and "tool" in (info.value.hint or "")
    with pytest.raises(ValueError, match="unknown plugin group"):
        PluginRegistry("widgets")
    assert set(GROUPS) == {"environments", "agents", "sandboxes", "models", "exporters"}
