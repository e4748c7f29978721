"""The one spec grammar (``kind[:name][?opt=v&...]``) as every consumer uses it: model specs (scripted,
local, router, URLs), agent specs, sandbox provider specs and exporter specs. Every spec form the suite and
the README use keeps working; a bad option is named in the error."""

from __future__ import annotations

from pathlib import Path

import pytest

from palaestra.agents.bash_agent import BashAgent
from palaestra.agents.registry import AGENTS, agent_names, make_agent
from palaestra.agents.tool_agent import ToolAgent
from palaestra.core.errors import ConfigError
from palaestra.models.factory import make_backend, parse_model_spec, parse_scripted
from palaestra.models.local import parse_spec as parse_local
from palaestra.models.router import parse_route
from palaestra.models.scripted import ScriptedBackend
from palaestra.plugins.spec import as_bool, list_of, parse_spec
from palaestra.sandbox.providers import get_provider, provider_class
from palaestra.sandbox.types import SandboxError


@pytest.mark.parametrize(("text", "kind", "name", "options"), [
    ("scripted", "scripted", "", {}),
    ("scripted:oracle", "scripted", "oracle", {}),
    ("scripted:oracle?accuracy=0.4&seed=1", "scripted", "oracle", {"accuracy": "0.4", "seed": "1"}),
    ("scripted:constant?text=\\boxed{B}", "scripted", "constant", {"text": "\\boxed{B}"}),
    ("scripted:constant?text=a+b%26c", "scripted", "constant", {"text": "a b&c"}),
    ("local", "local", "", {}),
    ("local?dtype=bfloat16&max_batch=8", "local", "", {"dtype": "bfloat16", "max_batch": "8"}),
    ("local:./m?threads=2", "local", "./m", {"threads": "2"}),
    ("router:tag?map=hard:b&default=a", "router", "tag", {"map": "hard:b", "default": "a"}),
    ("ray:10.0.0.1:6379?workers=4", "ray", "10.0.0.1:6379", {"workers": "4"}),
    ("bash?max_steps=3", "bash", "", {"max_steps": "3"}),
    ("claude-code", "claude-code", "", {}),
    ("local?pull", "local", "", {"pull": ""}),
])
def test_the_grammar_splits_kind_name_and_options(text: str, kind: str, name: str, options: dict[str, str]) -> None:
    spec = parse_spec(text)
    assert (spec.kind, spec.name, dict(spec.options), spec.text) == (kind, name, options, text)


@pytest.mark.parametrize(("text", "says"), [
    ("", "names no kind"),
    ("?a=1", "names no kind"),
    ("sc ripted:x", "is not a plugin name"),
    ("scripted:oracle?seed=1&seed=2", "option 'seed' is given twice"),
    ("scripted:oracle?=3", "an option has no name"),
])
def test_malformed_specs_say_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        parse_spec(text, what="model")


def test_typed_options_convert_and_errors_name_the_option() -> None:
    spec = parse_spec("k:n?i=3&f=0.5&b=off&l=1,2.5&s=x", what="thing")
    typed = spec.typed({"i": int, "f": float, "b": bool, "l": list_of(float), "s": str})
    assert typed == {"i": 3, "f": 0.5, "b": False, "l": [1.0, 2.5], "s": "x"}
    assert as_bool("") is True and as_bool("Yes") is True
    with pytest.raises(ConfigError) as bad:
        parse_spec("k?i=three", what="thing").typed({"i": int})
    assert bad.value.message == "thing 'k?i=three': option i='three' is not an integer"
    with pytest.raises(ConfigError) as unknown:
        parse_spec("k?i=1&zz=2&yy=3", what="thing").typed({"i": int})
    assert unknown.value.message == "unknown options 'yy', 'zz' in thing 'k?i=1&zz=2&yy=3'"
    assert unknown.value.hint == "k options: i"
    with pytest.raises(ConfigError, match="option l='1,x' is not a list of numbers"):
        parse_spec("k?l=1,x").typed({"l": list_of(float)})


def test_scripted_model_specs_build_what_they_say() -> None:
    backend = make_backend("scripted:oracle?latency_ms=200&failure_rate=0.3&seed=7")
    assert isinstance(backend, ScriptedBackend)
    assert (backend.policy, backend.latency_ms, backend.failure_rate) == ("oracle", 200.0, 0.3)
    assert parse_scripted("scripted") == ("oracle", {})
    assert parse_scripted("scripted:constant?text=Paris&accuracy=0.6") == ("constant", {"text": "Paris",
                                                                                       "accuracy": 0.6})
    with pytest.raises(ConfigError) as info:
        make_backend("scripted:oracle?latency=5")
    assert "'latency'" in info.value.message and "latency_ms" in (info.value.hint or "")
    with pytest.raises(ConfigError, match="option failure_rate='lots' is not a number"):
        make_backend("scripted:oracle?failure_rate=lots")
    with pytest.raises(ConfigError, match="unknown scripted policy"):
        make_backend("scripted:bogus")


def test_model_urls_keep_their_own_query_and_unknown_kinds_are_refused() -> None:
    url = parse_model_spec("http://127.0.0.1:8000/v1?api-version=2")
    assert (url.kind, url.name) == ("openai", "http://127.0.0.1:8000/v1?api-version=2")
    assert parse_model_spec("openai:https://h/v1").name == "https://h/v1"
    with pytest.raises(ConfigError, match="unknown model 'gpt-4o'") as info:
        make_backend("gpt-4o")
    assert "http://127.0.0.1:8000/v1" in (info.value.hint or "")
    with pytest.raises(ConfigError, match="not an http"):
        make_backend("openai:ftp://h")


def test_local_and_router_specs_use_the_same_grammar() -> None:
    assert parse_local("local:./m?threads=2") == ("./m", {"threads": "2"})
    with pytest.raises(ConfigError) as info:
        parse_local("local?temperature=2")
    assert "'temperature'" in info.value.message and "dtype" in (info.value.hint or "")
    route = parse_route("router:split?to=a,b&weights=3,1", {"a": "x", "b": "y"})
    assert (route.strategy, route.to, route.weights) == ("split", ["a", "b"], [3.0, 1.0])
    tag = parse_route("router:tag?map=hard:b&default=a", {"a": "x", "b": "y"})
    assert (tag.tag_map, tag.default, tag.to) == ({"hard": "b"}, "a", ["b"])
    cascade = parse_route("router:cascade?to=a,b&min_confidence=-0.5", {"a": "x", "b": "y"})
    assert cascade.min_confidence == -0.5
    with pytest.raises(ConfigError, match="option weights='1,x' is not a list of numbers"):
        parse_route("router:split?to=a,b&weights=1,x", {"a": "x", "b": "y"})
    with pytest.raises(ConfigError, match="unknown option 'wieghts'"):
        parse_route("router:split?to=a,b&wieghts=1,1", {"a": "x", "b": "y"})


def test_agent_specs_take_options_and_name_the_unknown() -> None:
    assert isinstance(make_agent("tool"), ToolAgent)
    bash = make_agent("bash?max_steps=3", max_steps=16)
    assert isinstance(bash, BashAgent) and bash.max_steps == 3
    five = make_agent("bash", max_steps=5)
    assert isinstance(five, BashAgent) and five.max_steps == 5
    assert "tool" in AGENTS and AGENTS["tool"] is ToolAgent and "nope" not in AGENTS
    assert {"tool", "single", "bash", "codex", "claude-code", "mini-swe-agent", "langgraph"} <= set(agent_names())
    with pytest.raises(ConfigError, match="unknown agent 'nope'") as info:
        make_agent("nope")
    assert "tool" in (info.value.hint or "")
    with pytest.raises(ConfigError, match="unknown option 'steps'"):
        make_agent("bash?steps=3")
    with pytest.raises(ConfigError, match="option max_steps='many' is not an integer"):
        make_agent("tool?max_steps=many")
    with pytest.raises(ConfigError, match="takes no target"):
        make_agent("tool:x")


@pytest.mark.filterwarnings("ignore:palaestra sandbox 'process' gives PARTIAL isolation:RuntimeWarning")
def test_sandbox_provider_specs() -> None:
    assert provider_class("process").__name__ == "ProcessProvider"
    assert get_provider("process") is get_provider("process")
    with pytest.raises(SandboxError, match="unknown sandbox provider 'nope'") as info:
        get_provider("nope")
    assert "process" in (info.value.hint or "")
    with pytest.raises(SandboxError, match="unknown option 'image'"):
        provider_class("docker?image=x")


def test_exporter_specs_are_typed_by_the_exporter(tmp_path: Path) -> None:
    from palaestra.report.exporters import EXPORTERS, export_run
    from palaestra.report.rundata import ReportError

    assert {"mlflow", "wandb"} <= set(EXPORTERS.names())
    with pytest.raises(ConfigError, match="unknown option 'bogus' in exporter 'mlflow\\?bogus=1'") as info:
        export_run("mlflow?bogus=1", str(tmp_path))
    assert "experiment" in (info.value.hint or "")
    with pytest.raises(ConfigError, match="option teardown='maybe' is not a boolean"):
        export_run("wandb?teardown=maybe", str(tmp_path))
    with pytest.raises(ReportError, match="unknown exporter 'csv'"):
        export_run("csv", str(tmp_path))
