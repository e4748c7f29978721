"""The grading side of ``code``: pull the program out of a model's answer, and the harness that runs
the hidden tests next to it inside a fresh sandbox.

The harness reads a per-run nonce from stdin *before* the solution is loaded and tags every result
line with it, so a solution that prints "PASS" or calls ``os._exit(0)`` earns nothing. It cannot stop a
solution that deliberately introspects the harness's memory: the sandbox protects the host, the
nonce only protects the score against naive tricks.

Before the solution is loaded, the harness reports ``started``. Without that line the harness never got
as far as the candidate's code (the interpreter is missing, the sandbox denies ``/dev/null``, the
harness crashed): that is the sandbox's failure, never the candidate's, so it is not scored."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)

HARNESS = r'''
import json, os, signal, sys
nonce = sys.stdin.readline().strip()
spec = json.load(open("_tests.json"))
report = os.fdopen(os.dup(1), "w")
_null = os.open(os.devnull, os.O_WRONLY)
os.dup2(_null, 1)  # the solution's own prints cannot crowd out (or forge) the results

def emit(kind, index, message=""):
    report.write("\n" + json.dumps([nonce, kind, index, str(message)[:500]]) + "\n")
    report.flush()

class _Timeout(BaseException):
    pass

def _alarm(signum, frame):
    raise _Timeout()

signal.signal(signal.SIGALRM, _alarm)
namespace = {"__name__": "solution"}
emit("started", -1)  # the harness itself works here: from now on, what goes wrong is the solution's
try:
    code = open("solution.py").read()
    signal.setitimer(signal.ITIMER_REAL, spec["load_timeout"])
    exec(compile(code, "solution.py", "exec"), namespace)
    signal.setitimer(signal.ITIMER_REAL, 0)
    if spec.get("setup"):
        exec(compile(spec["setup"], "setup", "exec"), namespace)
except BaseException as exc:
    signal.setitimer(signal.ITIMER_REAL, 0)
    where = getattr(exc, "lineno", None)
    emit("load_error", -1, type(exc).__name__ + ": " + str(exc) + (" (line %s)" % where if where else ""))
    sys.exit(0)
if spec["entry_point"] not in namespace:
    emit("load_error", -1, "solution.py does not define " + spec["entry_point"])
    sys.exit(0)
for index, test in enumerate(spec["tests"]):
    try:
        signal.setitimer(signal.ITIMER_REAL, spec["test_timeout"])
        exec(compile(test, "test_%d" % index, "exec"), dict(namespace))
        signal.setitimer(signal.ITIMER_REAL, 0)
        emit("pass", index)
    except _Timeout:
        emit("fail", index, "timed out")
    except AssertionError as exc:
        signal.setitimer(signal.ITIMER_REAL, 0)
        emit("fail", index, "assertion failed" + (": " + str(exc) if str(exc) else ""))
    except BaseException as exc:
        signal.setitimer(signal.ITIMER_REAL, 0)
        emit("fail", index, type(exc).__name__ + ": " + str(exc))
'''


def extract_code(text: str, entry_point: str | None = None) -> str:
    """The program in an answer: the last fenced block that defines ``entry_point`` (else the last
    Python-looking block), or the whole text when it has no fences but looks like code."""
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(text or "")]
    if blocks:
        wanted = [b for lang, b in blocks if entry_point and re.search(rf"\bdef\s+{re.escape(entry_point)}\b", b)]
        if wanted:
            return wanted[-1].strip("\n") + "\n"
        pythonish = [b for lang, b in blocks if lang in ("python", "py", "python3", "")]
        return (pythonish or [blocks[-1][1]])[-1].strip("\n") + "\n"
    stripped = (text or "").strip()
    if re.search(r"^\s*(def|class|import|from)\s", stripped, re.MULTILINE):
        return stripped + "\n"
    return ""


@dataclass
class TestReport:
    total: int
    passed: list[int] = field(default_factory=list)
    failures: dict[int, str] = field(default_factory=dict)
    load_error: str | None = None
    started: bool = False

    @property
    def fraction(self) -> float:
        return len(self.passed) / self.total if self.total else 0.0


def parse_results(stdout: str, nonce: str, total: int) -> TestReport:
    """Only lines carrying the nonce count; a test with no line failed (crash, timeout, exit)."""
    report = TestReport(total=total)
    for line in stdout.splitlines():
        if nonce not in line:
            continue
        try:
            tag, kind, index, message = json.loads(line)
        except (ValueError, TypeError):
            continue
        if tag != nonce:
            continue
        if kind == "started":
            report.started = True
        elif kind == "load_error":
            report.load_error = str(message)
        elif kind == "pass" and isinstance(index, int) and 0 <= index < total and index not in report.passed:
            report.passed.append(index)
        elif kind == "fail" and isinstance(index, int) and 0 <= index < total:
            report.failures[index] = str(message)
    for index in range(total):
        if index not in report.passed and index not in report.failures:
            report.failures[index] = "no result (the program crashed, exited or ran out of time)"
    return report
