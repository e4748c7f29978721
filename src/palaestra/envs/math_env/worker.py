"""The verifier worker process: ``python -m palaestra.envs.math_env.worker``.

Speaks JSON lines: prints ``{"ready": true}`` once math-verify is loaded, then answers each request
``{"fn": name, "args": [...]}`` with ``{"ok": result}`` or ``{"error": message}``. Only the functions
in ``FUNCTIONS`` can be called. It exits when its stdin closes (the parent went away).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, TextIO

from palaestra.envs.math_env.checker import check_answer, init_worker, warmup

FUNCTIONS: dict[str, Callable[..., Any]] = {"check_answer": check_answer}


def _send(out: TextIO, message: dict[str, Any]) -> None:
    out.write(json.dumps(message) + "\n")
    out.flush()


def main() -> None:
    out = sys.stdout
    sys.stdout = sys.stderr  # a stray print from a library must never corrupt the protocol
    init_worker()
    warmup()
    _send(out, {"ready": True})
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            fn = FUNCTIONS[request["fn"]]
            _send(out, {"ok": fn(*request.get("args", []))})
        except Exception as exc:
            _send(out, {"error": f"{type(exc).__name__}: {exc}"})


if __name__ == "__main__":
    main()
