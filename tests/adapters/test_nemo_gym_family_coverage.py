"""NeMo Gym example rows that used to fail before their server's verify ran, run through the installed wheel:

- a server defined only in a config variant (``arena``: ``lmarena_v2.yaml``; ``openenv``: one file per
  environment, picked by the agent the rows name) starts with that config, so its judge and prompt
  template are set;
- a judge asked for structured output (``bbq``: ``response_format: json_schema``) gets the scripted
  ``format`` judge's JSON, which bbq's own parser accepts;
- a game server (``grl_sokoban``) gets a move in the tag form its prompt shows, not a text it answers 400;
- a file that repeats an id (``iheval``) loads every row, unique ids, the row's own id kept for NeMo Gym.
"""

from __future__ import annotations

import runpy
import subprocess
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import orjson
import pytest
import yaml

NG = SimpleNamespace(**runpy.run_path(str(Path(__file__).parents[1] / "fixtures" / "nemo_gym.py")))
pytestmark = pytest.mark.skipif(NG.missing() is not None, reason=f"nemo-gym: {NG.missing()}")


def _servers() -> Path:
    return next(Path(NG.venv_dir()).glob("lib/python3*/site-packages/resources_servers"))


def _rows(server: str) -> list[dict[str, object]]:
    text = (_servers() / server / "data" / "example.jsonl").read_text(encoding="utf-8")
    return [orjson.loads(line) for line in text.splitlines() if line.strip()]


def _top_keys(path: Path) -> set[str]:
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return set(data) if isinstance(data, dict) else set()


def test_a_server_without_its_own_config_file_is_built_from_the_variant_that_defines_it() -> None:
    from palaestra.adapters.nemo_gym_launch import _server_block, config_path, names_model_server

    arena = config_path("arena", None)
    assert arena is not None and not (arena.parent / "arena.yaml").exists()
    assert _server_block(arena, "arena") is not None
    # the rows name their agent: the variant defining it wins over the first file by name
    agent = str(_rows("openenv")[0]["agent_ref"]["name"])  # type: ignore[index]
    chosen, first = config_path("openenv", None, agent), config_path("openenv", None)
    assert chosen is not None and agent in _top_keys(chosen)
    assert first is not None and first == sorted(first.parent.glob("*.yaml"))[0]
    own = config_path("mcqa", None)
    assert own is not None and own.name == "mcqa.yaml"
    # a judge named in a variant, or a model URL interpolated (speed_bench: ${policy_base_url}), is a model server
    assert names_model_server("jailbreak_detection", None)
    assert "${policy_base_url}" in (config_path("speed_bench", None) or Path()).read_text(encoding="utf-8")
    assert names_model_server("speed_bench", None)


def test_a_repeated_id_keeps_every_row_with_unique_ids_and_the_rows_own_id(tmp_path: Path) -> None:
    from palaestra.adapters import nemo_gym_rows
    from palaestra.adapters.nemo_gym_server import nemo_row
    from palaestra.rollout.tasks import load_task_file

    rows = _rows("iheval")
    repeated = [i for i, n in Counter(str(r.get("id")) for r in rows).items() if n > 1]
    assert repeated, "iheval's example file no longer repeats an id: pick a file that does"
    loaded = load_task_file(_servers() / "iheval" / "data" / "example.jsonl", "nemo_gym:iheval")
    assert not loaded.problems and len(loaded.tasks) == len(rows)
    assert len({t.id for t in loaded.tasks}) == len(rows)
    renamed = [t for t in loaded.tasks if nemo_gym_rows.ORIGINAL_ID_KEY in t.metadata]
    assert renamed and all(str(t.metadata[nemo_gym_rows.ORIGINAL_ID_KEY]) in repeated for t in renamed)
    for task, row in zip(loaded.tasks, rows, strict=True):  # NeMo Gym's server gets the id the row wrote
        assert nemo_row(task)["id"] == row["id"]


@pytest.mark.parametrize("server", ["scicode", "legal_agent_bench", "toolsandbox", "nemo_user_sim"])
def test_a_row_with_no_input_runs_the_agent_that_builds_its_prompt_or_is_refused(server: str) -> None:
    """Never a rollout that sends the model nothing. Rows whose NeMo Gym agent builds the prompt
    (scicode_agent, harbor_agent) are routed to NeMo Gym's own agent (``nemo-gym``, tests/adapters/
    test_nemo_gym_agent.py); rows of an agent that starts from the server's seed (toolsandbox) load for the
    run's agent: the seed answers their prompt; rows that are no Responses request at all (nemo_user_sim's
    Environment Server tasks) are refused at load, naming the Environment Server."""
    from palaestra.rollout.config import RunConfig
    from palaestra.rollout.selection import select_tasks

    path = _servers() / server / "data" / "example.jsonl"
    cfg = RunConfig.model_validate({"input": str(path), "env": f"nemo_gym:{server}", "model": "scripted:oracle",
                                    "skip_invalid": True})
    tasks, refused = select_tasks(cfg)
    if server == "nemo_user_sim":
        assert not tasks and len(refused) == len(_rows(server))
        assert all("needs_agent: " in line and "Environment Server 'nemo_user_sim'" in line for line in refused)
        return
    assert len(tasks) == len(_rows(server)) and not refused
    assert all(t.agent == (None if server == "toolsandbox" else "nemo-gym") for t in tasks)


def test_a_seed_that_answers_observations_opens_an_episode_driven_by_step() -> None:
    """The JSON of toolsandbox's own seed and step answers (shape from its schemas): the observations are
    the prompt, its flat tools chat tools, a call one /step item, its output what the model reads."""
    from palaestra.adapters import nemo_gym_episodes as eps

    seeded = {"env_id": "e1", "scenario": "s", "obs": [
        {"role": "system", "content": "Ask when unsure.", "type": "message"},
        {"role": "user", "content": [{"type": "input_text", "text": "Add Bart"}], "type": "message"}],
        "tools": [{"type": "function", "name": "add_contact", "strict": False, "description": "Add one.",
                   "parameters": {"type": "object", "properties": {"name": {"type": "string"}}}}]}
    ep = eps.episode(seeded)
    assert ep is not None and eps.episode({"obs": []}) is None and eps.episode({"env_id": "x"}) is None
    assert [m["content"] for m in ep.messages] == ["Ask when unsure.", "Add Bart"]
    assert ep.tools[0]["function"]["name"] == "add_contact" and "strict" not in ep.tools[0]["function"]
    body = eps.call_step(ep, "add_contact", {"name": "Bart"})
    (call,) = body["function_calls"]
    assert body["env_id"] == "e1" and orjson.loads(call["arguments"]) == {"name": "Bart"}
    assert call["call_id"] != eps.call_step(ep, "add_contact", {})["function_calls"][0]["call_id"]
    shown = eps.observe(ep, {"obs": [{"type": "function_call_output", "call_id": call["call_id"], "output": "ok"},
                                     {"role": "user", "content": "Thanks"}], "done": True})
    assert shown.splitlines() == ["ok", "[user] Thanks"] and ep.done
    assert eps.text_step(ep, "Done.") == {"env_id": "e1", "function_calls": [], "text": "Done."}


def test_the_scripted_format_judge_is_parsed_by_bbqs_own_parser() -> None:
    """bbq's Answer and Explanation checks ask for one JSON object of their pydantic schemas; the value the
    format policy builds for each passes bbq's own parser (run in NeMo Gym's venv, from the wheel)."""
    here = Path(__file__).parents[2] / "src" / "palaestra" / "models" / "schema_instance.py"
    script = (
        "import json, runpy, sys\n"
        f"m = runpy.run_path({str(here)!r})\n"
        "from resources_servers.bbq.util import AnswerJudgment, ExplanationJudgment, parse_answer_judgment, "
        "parse_explanation_judgment\n"
        "for model, parse in ((AnswerJudgment, parse_answer_judgment), "
        "(ExplanationJudgment, parse_explanation_judgment)):\n"
        "    print(type(parse(json.dumps(m['instance'](model.model_json_schema())))).__name__)\n")
    done = subprocess.run([str(NG.python_path()), "-c", script], cwd=_servers().parent, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["AnswerJudgment", "ExplanationJudgment"]


@pytest.mark.timeout(420)
@pytest.mark.parametrize("server", ["grl_sokoban", "bbq", "arena", "toolsandbox"])
def test_the_family_scores_its_example_rows_end_to_end(server: str, tmp_path: Path) -> None:
    """A published row through the real server with the scripted oracle: each rollout gets a verdict
    (none fails), and a judge-backed server says which judge answered."""
    import asyncio

    from palaestra.adapters import nemo_gym_references as refs
    from palaestra.adapters.nemo_gym_server import DEFAULT_JUDGE
    from palaestra.orchestrator import run_eval
    from palaestra.rollout import rundir
    from palaestra.rollout.config import RunConfig
    from palaestra.rollout.journal_read import read_journal
    from palaestra.rollout.tasks import load_task_file

    rows = tmp_path / "rows.jsonl"
    rows.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in _rows(server)[:1]))
    if server == "grl_sokoban":  # no answer in the row: the move its prompt shows
        task = load_task_file(rows, f"nemo_gym:{server}").tasks[0]
        assert refs.reference_policy(server, task).startswith(refs.FIXED_REPLY + ": ")
        reference = refs.reference(server, task)
        assert reference is not None and reference.final_answer.startswith("<action>")
    cfg = RunConfig.model_validate({"input": str(rows), "env": f"nemo_gym:{server}", "model": "scripted:oracle",
                                    "max_attempts": 1, "out": str(tmp_path / "run"), "min_coverage": 0.0})
    asyncio.run(run_eval(cfg))
    records, _ = read_journal(tmp_path / "run" / rundir.JOURNAL, missing_ok=True)
    outcomes = [r.get("outcome") or {} for r in records]
    assert len(outcomes) == 1 and all(o.get("status") == "scored" for o in outcomes), outcomes
    if server == "toolsandbox":  # the episode was closed and scored by the server itself before /verify
        meta = [(r.get("verdict") or {}).get("metadata", {}) for r in records]
        assert all("milestone_similarity" in m and m["nemo_gym_episode"]["steps"] for m in meta)
    if server != "grl_sokoban":
        assert all((r.get("verdict") or {}).get("metadata", {}).get("nemo_gym_model") == DEFAULT_JUDGE
                   for r in records)
