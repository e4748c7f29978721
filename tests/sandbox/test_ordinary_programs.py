"""Every provider must run an *ordinary* program, not only the escape attempts the other tests try.

A sandbox that denies ``/dev/null`` (Landlock once did, for the ``process`` provider) turns every
grading run into a crash that looks like a wrong answer: Python's ``subprocess.DEVNULL``, a shell's
``2>/dev/null``, ``command -v bash >/dev/null`` all fail. So each provider on this machine runs one
program that does what everyday programs do and the test reads back every line it printed.
A provider is skipped only where its tools are not installed (docker: where no engine can start)."""

from __future__ import annotations

import asyncio

import pytest
from sandbox_helpers import PROVIDERS, Target, make_target, provider_id

PROGRAM = r'''
import os, subprocess, sys, tempfile
with open("/dev/null", "w") as fh:                        # what os.devnull, 2>/dev/null do
    fh.write("discarded")
with open(os.devnull, "wb") as fh:
    fh.write(b"x" * 4096)
print("devnull-read", len(open("/dev/null", "rb").read()))
print("zero", open("/dev/zero", "rb").read(8) == b"\0" * 8)
print("urandom", len(open("/dev/urandom", "rb").read(16)))
print("os.urandom", len(os.urandom(16)))
with tempfile.NamedTemporaryFile("w+", delete=False) as fh:   # $TMPDIR (the sandbox's /tmp)
    fh.write("temp-content")
    temp = fh.name
print("tempfile", open(temp).read(), temp.startswith(tempfile.gettempdir()))
os.unlink(temp)
with tempfile.TemporaryDirectory() as d:
    open(os.path.join(d, "f"), "w").write("in-dir")
    print("tempdir", os.listdir(d))
print("stdin", sys.stdin.readline().strip())
child = subprocess.run([sys.executable, "-c", "import sys; print('child', sys.argv[1])", "ok"],
                       capture_output=True, text=True, stdin=subprocess.DEVNULL)
print(child.stdout.strip(), child.returncode)
py = subprocess.run(["python3", "-c", "print(6 * 7)"], capture_output=True, text=True)
print("python3-c", py.stdout.strip(), py.returncode, py.stderr.strip()[-200:])
sh = subprocess.run(["bash", "-c", "echo quiet >/dev/null 2>&1 && echo loud >/dev/stderr; "
                     "t=$(mktemp) && echo bash-$((6 * 7)) > $t && cat $t && rm $t; "
                     "command -v python3 >/dev/null && echo found-python"],
                    capture_output=True, text=True, stdin=subprocess.DEVNULL)
print("bash-c", sh.stdout.split(), sh.stderr.strip(), sh.returncode)
posix = subprocess.run(["sh", "-c", "read x; echo sh-$x; : > /dev/null; head -c 3 /dev/zero | wc -c"],
                       input="in\n", capture_output=True, text=True)
print("sh-c", posix.stdout.split(), posix.returncode, posix.stderr.strip()[-200:])
print("done")
'''

EXPECTED = [
    "devnull-read 0",
    "zero True",
    "urandom 16",
    "os.urandom 16",
    "tempfile temp-content True",
    "tempdir ['f']",
    "stdin from-the-runtime",
    "child ok 0",
    "python3-c 42 0 ",
    "bash-c ['bash-42', 'found-python'] loud 0",
    "sh-c ['sh-in', '3'] 0 ",
    "done",
]


@pytest.fixture(params=[*PROVIDERS, "none"], ids=provider_id)
def ordinary_target(request: pytest.FixtureRequest) -> Target:
    return make_target(request.param, request)


def test_ordinary_program_runs(ordinary_target: Target) -> None:
    """Devices, temp files, stdin, subprocesses, ``python3 -c`` and ``bash -c``: all as on a host."""
    t = ordinary_target

    async def go() -> tuple[int, str, str]:
        async with await t.provider.create(t.spec(files={"main.py": PROGRAM})) as box:
            r = await box.exec([t.python, "main.py"], stdin=b"from-the-runtime\n", timeout=60)
            return r.exit_code, r.stdout, r.stderr

    code, out, err = asyncio.run(go())
    assert code == 0, f"{t.name}: exit {code}\nstdout:\n{out}\nstderr:\n{err[-2000:]}"
    assert out.splitlines() == EXPECTED, f"{t.name}: stderr:\n{err[-2000:]}"


def test_ordinary_shell_script_runs(ordinary_target: Target) -> None:
    """The same through a shell script exec'd directly, as ``terminal`` runs a task's tests: redirections
    to the devices and to ``/dev/stdout``/``/dev/stderr`` (a reopened pipe), here-documents, stdin."""
    t = ordinary_target
    script = ("set -e\n"
              "echo discarded >/dev/null 2>/dev/null\n"
              "echo to-stderr >/dev/stderr\n"
              "echo to-stdout >/dev/stdout\n"
              "read line; echo \"stdin=$line\"\n"
              "cat > note.txt <<EOF\nhere-$((2 + 3))\nEOF\n"
              "cat note.txt\n"
              "head -c 5 /dev/urandom | wc -c | tr -d ' '\n"
              "if command -v bash >/dev/null 2>&1; then echo has-bash; fi\n")

    async def go() -> tuple[int, str, str]:
        async with await t.provider.create(t.spec(files={"t.sh": script})) as box:
            r = await box.exec(["/bin/sh", "t.sh"], stdin=b"typed\n", timeout=60)
            return r.exit_code, r.stdout, r.stderr

    code, out, err = asyncio.run(go())
    assert code == 0, f"{t.name}: exit {code}\nstdout:\n{out}\nstderr:\n{err[-2000:]}"
    assert out.splitlines() == ["to-stdout", "stdin=typed", "here-5", "5", "has-bash"]
    assert err.strip() == "to-stderr"
