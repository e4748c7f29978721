"""NeMo Gym resources servers → Palaestra environments: the one family table, and the routing of a row to it.

NeMo Gym names a row's grader by its resources server (``resources_servers/<name>``, reached through the
row's ``agent_ref``). ``FAMILIES`` holds every resources server with published example rows, and the
environment that grades it: a native Palaestra environment where one grades it equivalently, else NeMo
Gym's own server run as it is (``nemo_gym:<server>``, ``adapters/nemo_gym_server.py``), with the reason
it is not native. How a row's verifier fields become a native environment's fields is
``nemo_gym_rows.to_native``; a ``nemo_gym:`` environment gets the row unchanged.

Routing: a row's ``agent_ref`` names a NeMo Gym agent; that agent's config names a resources server,
whose type is the family. A run given NeMo Gym's own config file resolves the agent through it exactly
(``routes_from_nemo_config``, read by ``eval run --config``); without one, the family is read from the
agent's name (``server_of_agent``).

Nothing here imports NeMo Gym: the table and the routing work from names alone.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Family:
    """One NeMo Gym resources server and the Palaestra environment grading its rows."""

    server: str
    env: str
    reason: str = ""  # when NeMo Gym's own server grades it: why no native environment does
    note: str = ""  # where the native grading knowingly differs from NeMo Gym's verifier

    @property
    def native(self) -> bool:
        """Whether a Palaestra environment grades it (else NeMo Gym's own server, ``nemo_gym:<server>``)."""
        return not self.env.startswith(NEMO_ENV_PREFIX)


_JUDGE_NOTE = ("graded by Palaestra's judge environment against expected_answer with the configured judge "
               "model (NeMo Gym uses its own equivalence prompt)")
_MCQA_NOTE = "option letter read by Palaestra's mcqa extractor (NeMo Gym's own reading with nemo_compat; tests/parity)"
_MATH_NOTE = "math-verify equivalence of the last \\boxed{} answer with expected_answer (no LLM judge fallback)"

_NATIVE: dict[str, tuple[str, str]] = {
    "mcqa": ("mcqa", _MCQA_NOTE),
    "gpqa_diamond": ("mcqa", _MCQA_NOTE),
    "bunsenbench_chemistry_mcq": ("mcqa", "the `<choice>option text</choice>` the rows ask for is read as the "
                                  "row's output_regex and matched to an option (NeMo Gym's own reader with "
                                  "nemo_compat; tests/parity)"),
    "math_with_judge": ("math", _MATH_NOTE),
    "polymath": ("math", _MATH_NOTE),
    "physics_judge": ("math", _MATH_NOTE + "; NeMo Gym's server is math_with_judge's"),
    "math_with_autograder": ("math", _MATH_NOTE + "; NeMo Gym's server is math_with_judge's with an autograder"),
    "instruction_following": ("ifeval", "IFEval instruction ids implemented natively (see envs/ifeval/nemo_ids.py)"),
    "ifbench": ("ifeval", "IFBench ids implemented natively where no NLP model is needed (IFBench's "
                "own readings with nemo_compat; tests/parity)"),
    "structured_outputs": ("json_schema", "JSON Schema validation with jsonschema; tool-call replies are read from "
                           "the named tool's payload"),
    "single_step_tool_use_with_argument_comparison": ("tool_call", "expected_action compared by name and "
                                                      "parsed arguments (with nemo_compat, NeMo Gym's string "
                                                      "similarity and free surplus calls; tests/parity)"),
    "example_tool_call_multireward": ("tool_call", "expected_call compared by name and arguments "
                                      "(with nemo_compat, NeMo Gym's three-part reward; tests/parity)"),
    "xlam_fc": ("tool_call", "expected_answers compared as an unordered set of calls (with "
                "nemo_compat, only the expected keys; tests/parity)"),
    "text_to_sql": ("sql", "sqlite rows: both queries executed on the row's sql_context, result sets compared "
                    "(NeMo Gym asks an LLM judge); mysql/postgresql rows are refused"),
    "reasoning_gym": ("reasoning_gym", "scored by reasoning-gym's own score_answer for the row's source_dataset"),
    "equivalence_llm_judge": ("judge", _JUDGE_NOTE),
    "simpleqa": ("judge", _JUDGE_NOTE),
    "frontierscience_judge": ("judge", _JUDGE_NOTE),
    "ugphysics_judge": ("judge", _JUDGE_NOTE),
    "omniscience": ("judge", _JUDGE_NOTE),
}

_REASONS: dict[str, str] = {
    "workplace_assistant": "its tools and office data are NeMo Gym's own, not those of Palaestra's workplace "
                           "environment, so its ground_truth calls cannot be replayed there",
    "bird_sql": "its rows name a BIRD SQLite database (db_id) that neither the rows nor the wheel carry",
    "spider2_lite": "its rows name Spider 2.0 databases (db_id) that neither the rows nor the wheel carry",
    "grl_sokoban": "levels come from GRL's gym-sokoban generator for (level_id, seed), which Palaestra's "
                   "sokoban environment does not reproduce",
}
_DEFAULT_REASON = "no native Palaestra environment grades this resources server: NeMo Gym's own server does"
NEMO_ENV_PREFIX = "nemo_gym:"

# Every resources server that ships data/example*.jsonl in NeMo Gym 0.7.0 (space-separated).
_SERVER_NAMES = (
    "aalcr abstention aegis_v4_safety agentif arc_agi arena arena_judge asr_with_pc assaybench aviary bbq "
    "bigcodebench bird_sql blackjack browsecomp_advanced_harness bunsenbench_chemistry_mcq calendar circle_click "
    "circle_count citation_if code_fim code_gen competitive_coding_challenges conversational_tool_use_simulation "
    "critpt cvdp deepsearchqa deepswe denovo_swe equivalence_llm_judge equivalence_rule ether0 evalplus "
    "example_mcp_weather example_multi_step example_multi_turn_gymnasium example_session_state_mgmt "
    "example_single_tool_call example_tool_call_multireward false_statement_judge finance_agent_v2 "
    "finance_sec_search format_verification frontierscience_judge fukuyamabench gdp_pdf gdpval "
    "generative_reward_model genrm_compare google_search gpqa_diamond graphwalks grl_sokoban grl_tetris "
    "gui_coordinate gymnasium hotpotqa_qa ifbench iheval image_tools imo_gradingbench imo_proofbench_judge "
    "indian_banking indirect_prompt_injection instruction_following interactive_browser inverse_if "
    "jailbreak_detection job_bench labbench2_vlm lc_niah legal_agent_bench litmus_agent longmemeval longmt_eval "
    "math_advanced_calculations math_formal_lean math_proof_judgement math_with_autograder math_with_code "
    "math_with_judge mcqa moldetox mrcr multichallenge nemo_user_sim newton_bench ns_tools nvarc omniscience "
    "openair_congestion openenv osworld over_refusal_detection physics_judge polymath proof_genselect "
    "proof_judge proof_verification ragtruth reasoning_gym rolemrc ruler ruler2 scale_swe scicode scicodepile "
    "sec_local_index simpleqa single_step_tool_use_with_argument_comparison spartqa speed_bench spider2_lite "
    "string_match structeval structured_outputs swe_next swe_pivot swe_rebench swebench swebench_pro swemer_oml "
    "swemer_v1 swemer_v2 swerl_gen swerl_llm_judge tales tavily_search terminal_bench_2_1 terminal_bench_4 "
    "terminal_multi_harness terminus_judge text_to_sql toolsandbox ugphysics_judge verifif vibench vlm_eval_kit "
    "widesearch wmt_translation wordle workplace_assistant workspace_bench xlam_fc xstest"
)
_SERVERS = tuple(_SERVER_NAMES.split())


def _family(server: str) -> Family:
    if server in _NATIVE:
        env, note = _NATIVE[server]
        return Family(server, env, note=note)
    return Family(server, NEMO_ENV_PREFIX + server, reason=_REASONS.get(server, _DEFAULT_REASON))


FAMILIES: dict[str, Family] = {s: _family(s) for s in sorted({*_SERVERS, *_NATIVE})}

# Suffixes NeMo Gym's example configs give the agent of a resources server (``mcqa_simple_agent``).
_AGENT_SUFFIXES = ("_simple_agent", "_gymnasium_agent", "_agent")


def family(server: str) -> Family | None:
    """The family of a resources server name, or None for a name NeMo Gym does not ship."""
    return FAMILIES.get(server)


def server_of_agent(agent_name: str) -> str | None:
    """The resources server an ``agent_ref`` name most likely belongs to (``gpqa_diamond_simple_agent`` →
    ``gpqa_diamond``), or None. Only a name that is a known server once a suffix is removed counts: the
    agent-to-server binding proper lives in NeMo Gym's config files."""
    if agent_name in FAMILIES:
        return agent_name
    for suffix in _AGENT_SUFFIXES:
        if agent_name.endswith(suffix) and agent_name[: -len(suffix)] in FAMILIES:
            return agent_name[: -len(suffix)]
    return None


def refusal(server: str) -> str | None:
    """Why rows of ``server`` are refused at load: only a name NeMo Gym does not ship is (every family
    it ships has an environment, native or NeMo Gym's own server)."""
    return None if server in FAMILIES else f"'{server}' is not a NeMo Gym resources server Palaestra knows"


def graded_families() -> list[str]:
    """The resources servers whose rows a native Palaestra environment grades (for error hints)."""
    return sorted(s for s, fam in FAMILIES.items() if fam.native)


# ---- routing (agent_ref, NeMo Gym config files) ------------------------------------------------------

NEMO_SERVER_KINDS = ("resources_servers", "responses_api_agents", "responses_api_models", "environment_servers")


def _word_match(name: str) -> str | None:
    """The longest family name in ``name`` as whole ``_``-separated words (``structured_outputs_v4_simple_agent``
    → ``structured_outputs``), for agent names ``server_of_agent``'s suffixes do not cover."""
    words = "_" + re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_") + "_"
    found = [server for server in FAMILIES if f"_{server}_" in words]
    return max(found, key=len) if found else None


def route_agent_ref(agent_ref: Any, routes: Mapping[str, str] | None = None) -> tuple[str | None, str | None]:
    """(resources server, Palaestra environment) a row's ``agent_ref`` routes to, either None when unknown.

    The run's routes (from a NeMo Gym config file, or a run file's ``routes``) decide first: a route's
    target is a resources-server type (then its family's environment) or else an environment name.
    Without one, the server is read from the agent's name. A family without a native environment routes
    to NeMo Gym's own server (``nemo_gym:<server>``)."""
    name = agent_ref.get("name") if isinstance(agent_ref, dict) else agent_ref
    if not isinstance(name, str) or not name:
        return None, None
    if routes and name in routes:
        target = routes[name]
        fam = FAMILIES.get(target)
        return (target, fam.env) if fam is not None else (None, target)
    server = server_of_agent(name) or _word_match(name)
    fam = FAMILIES.get(server) if server else None
    return server, fam.env if fam is not None else None


def _instance(value: Any, kind: str) -> tuple[str, dict[str, Any]] | None:
    """``{kind: {type_name: {...}}}`` → (type_name, its config), for one instance of a NeMo Gym config."""
    if not isinstance(value, dict) or not isinstance(value.get(kind), dict) or len(value[kind]) != 1:
        return None
    ((type_name, body),) = value[kind].items()
    return str(type_name), body if isinstance(body, dict) else {}


def is_nemo_config(data: Mapping[str, Any]) -> bool:
    """Whether a YAML mapping is a NeMo Gym server config (instances of resources servers, agents, models)."""
    return any(isinstance(v, dict) and any(k in v for k in NEMO_SERVER_KINDS) for v in data.values())


def routes_from_nemo_config(data: Mapping[str, Any]) -> dict[str, str]:
    """Agent and resources-server instance names of a NeMo Gym config → resources-server type.

    A resources-server instance (``mcqa: {resources_servers: {mcqa: ...}}``) routes to its type; an agent
    instance (``mcqa_simple_agent: {responses_api_agents: {simple_agent: {resources_server: {name: mcqa}}}}``)
    to the type of the server instance it names. Model servers and the rest describe NeMo Gym's own
    processes and route nothing."""
    servers: dict[str, str] = {}
    for name, value in data.items():
        found = _instance(value, "resources_servers")
        if found is not None:
            servers[str(name)] = found[0]
    routes = dict(servers)
    for name, value in data.items():
        found = _instance(value, "responses_api_agents")
        if found is None:
            continue
        ref = found[1].get("resources_server")
        server = ref.get("name") if isinstance(ref, dict) else None
        if isinstance(server, str) and server:
            routes[str(name)] = servers.get(server, server)  # a server defined in another config file: its name
    return routes


# ---- rows whose prompt NeMo Gym's own agent builds ----------------------------------------------------

NEMO_AGENT = "nemo-gym"  # Palaestra's harness that runs NeMo Gym's own agent server (adapters/nemo_gym_agent.py)


def row_agent(env: str, agent_ref: Any, has_input: bool) -> str | None:
    """The harness a ``nemo_gym:<server>`` row needs, or None for the run's own: a row with no input whose
    NeMo Gym agent builds the prompt itself (``scicode_agent`` from the row's sub-steps) is run by NeMo Gym's
    own agent (``nemo-gym``). An agent that starts from the server's ``/seed_session`` observations
    (``toolsandbox_agent``) is driven by the environment instead (``nemo_gym_episodes``). Reads the server's
    config file from the installed wheel; without NeMo Gym installed, None (the row is then refused by its
    environment's own check, saying why)."""
    if has_input or not env.startswith(NEMO_ENV_PREFIX):
        return None
    name = agent_ref.get("name") if isinstance(agent_ref, dict) else agent_ref
    return _agent_of(env.removeprefix(NEMO_ENV_PREFIX), name if isinstance(name, str) else None)


@functools.lru_cache(maxsize=256)
def _agent_of(server: str, agent_ref: str | None) -> str | None:
    from palaestra.adapters.nemo_gym_episodes import OBSERVING_AGENTS
    from palaestra.adapters.nemo_gym_launch import prompt_agent
    from palaestra.core.errors import ConfigError

    try:
        agent = prompt_agent(server, None, agent_ref)
    except ConfigError:  # NeMo Gym is not installed here
        return None
    return NEMO_AGENT if agent is not None and agent not in OBSERVING_AGENTS else None
