"""Run NeMo Gym's own verifiers on (row, reply) cases: the NeMo Gym side of the parity tests.

Run by the NeMo Gym venv's interpreter (never by Palaestra's): it imports the resources-server classes
from the installed wheel and calls their ``verify`` coroutine directly with a verify request built the
way NeMo Gym's own unit tests build one, so no server is started and no port is opened. Reads JSON
lines ``{"server": "mcqa", "row": {...}, "reply": "text", "config": {...}}`` on stdin and writes one JSON
line per case: ``{"reward": float, "extracted": str | null, ...}`` (a case may give ``"output"``, the
response's Responses output items such as function calls, instead of ``"reply"``) or ``{"error": "..."}`` when NeMo Gym
refused the case (a row its request model rejects, a verifier that raised).

Nothing here re-implements a verifier: a wrong verdict on NeMo Gym's side must come from NeMo Gym.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
from typing import Any
from unittest.mock import MagicMock

from nemo_gym.openai_utils import NeMoGymResponse
from nemo_gym.server_utils import ServerClient

# server name -> (module, server class, config class, verify request class)
SERVERS = {
    "mcqa": ("resources_servers.mcqa.app", "MCQAResourcesServer", "MCQAResourcesServerConfig",
             "MCQAVerifyRequest"),
    "gpqa_diamond": ("resources_servers.gpqa_diamond.app", "GPQADiamondResourcesServer",
                     "GPQADiamondResourcesServerConfig", "MCQAVerifyRequest"),
    "math_with_judge": ("resources_servers.math_with_judge.app", "LibraryJudgeMathResourcesServer",
                        "LibraryJudgeMathResourcesServerConfig", "LibraryJudgeMathVerifyRequest"),
    "instruction_following": ("resources_servers.instruction_following.app",
                              "InstructionFollowingResourcesServer",
                              "InstructionFollowingResourcesServerConfig",
                              "InstructionFollowingVerifyRequest"),
    "structured_outputs": ("resources_servers.structured_outputs.app", "StructuredOutputsResourcesServer",
                           "StructuredOutputsResourcesServerConfig", "StructuredOutputsVerifyRequest"),
    "reasoning_gym": ("resources_servers.reasoning_gym.app", "ReasoningGymResourcesServer",
                      "ReasoningGymResourcesServerConfig", "ReasoningGymVerifyRequest"),
    "polymath": ("resources_servers.polymath.app", "PolyMathResourcesServer", "PolyMathResourcesServerConfig",
                 "PolyMathVerifyRequest"),
    "bunsenbench_chemistry_mcq": ("resources_servers.bunsenbench_chemistry_mcq.app", "BunsenChemResourcesServer",
                                  "BunsenChemResourcesServerConfig", "BunsenChemVerifyRequest"),
    "single_step_tool_use_with_argument_comparison": (
        "resources_servers.single_step_tool_use_with_argument_comparison.app",
        "SingleStepToolUseArgumentComparisonResourcesServer",
        "SingleStepToolUseArgumentComparisonResourcesServerConfig",
        "SingleStepToolUseArgumentComparisonVerifyRequest"),
    "xlam_fc": ("resources_servers.xlam_fc.app", "XlamFcResourcesServer", "XlamFcResourcesServerConfig",
                "XlamFcVerifyRequest"),
    "example_tool_call_multireward": ("resources_servers.example_tool_call_multireward.app",
                                      "ToolCallMultiRewardResourcesServer", "ToolCallMultiRewardResourcesServerConfig",
                                      "ToolCallMultiRewardVerifyRequest"),
}

# What a config needs beyond the common fields, per server (math_with_judge: the symbolic part only). The
# values are those of the server's own shipped YAML config (``configs/<server>.yaml``).
_MATH = {
    "judge_model_server": {"type": "responses_api_models", "name": "unused"},
    "judge_responses_create_params": {"input": []},
    "should_use_judge": False,
    # A generous deadline: on a loaded machine sympy may need more than the default 10 s, and NeMo Gym
    # scores a timeout 0, which would make the comparison depend on load.
    "library_verifier_timeout_seconds": 300.0,
}
CONFIG_EXTRA: dict[str, dict[str, Any]] = {
    "math_with_judge": _MATH,
    "polymath": _MATH,
    "single_step_tool_use_with_argument_comparison": {
        "tool_call_comparator_config": {"word_count_similarity_threshold": 0.1}},
}

_servers: dict[str, tuple[Any, Any]] = {}


def _server(name: str, overrides: dict[str, Any]) -> tuple[Any, Any]:
    key = name + json.dumps(overrides, sort_keys=True)
    if key not in _servers:
        module_name, server_cls, config_cls, request_cls = SERVERS[name]
        module = importlib.import_module(module_name)
        fields = {"host": "127.0.0.1", "port": 0, "entrypoint": "", "name": "", **CONFIG_EXTRA.get(name, {}),
                  **overrides}
        config = getattr(module, config_cls)(**fields)
        server = getattr(module, server_cls)(config=config, server_client=MagicMock(spec=ServerClient))
        _servers[key] = (server, getattr(module, request_cls))
    return _servers[key]


def _response(reply: str | None, output: list[dict[str, Any]] | None) -> NeMoGymResponse:
    """A Responses API response: the case's own output items (function calls, messages) when it gives
    them, else one assistant message holding ``reply``."""
    if output is None:
        output = [{"id": "msg_parity", "type": "message", "role": "assistant", "status": "completed",
                   "content": [{"type": "output_text", "text": reply or "", "annotations": []}]}]
    return NeMoGymResponse(
        id="resp_parity", created_at=0.0, model="parity", object="response", output=output,
        parallel_tool_calls=False, tool_choice="auto", tools=[],
    )


async def _one(case: dict[str, Any]) -> dict[str, Any]:
    server, request_cls = _server(case["server"], case.get("config") or {})
    row = {k: v for k, v in case["row"].items() if k != "agent_ref"}
    try:
        request = request_cls(**row, response=_response(case.get("reply"), case.get("output")))
        result = await server.verify(request)
    except Exception as exc:  # reported per case: the test decides what a refusal means
        return {"error": f"{type(exc).__name__}: {exc}"[:500]}
    extra = {k: getattr(result, k) for k in ("correctness", "schema_valid", "format", "error_type")
             if getattr(result, k, None) is not None}
    return {"reward": float(result.reward), "extracted": getattr(result, "extracted_answer", None), **extra}


async def main() -> None:
    for line in sys.stdin:
        if line.strip():
            sys.stdout.write(json.dumps(await _one(json.loads(line))) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(main())
