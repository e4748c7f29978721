"""A stand-in coding-agent CLI (stdlib only) for the generic runner's tests: it speaks OpenAI chat to the
base URL it is given and does one scripted thing per mode. Real CLIs are tested in test_cli_*.py.

    python fake_cli.py BASE_URL MODE [ARG]
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import urllib.error
import urllib.request


def chat(base: str, text: str) -> str:
    body = {"model": "fake", "temperature": 1.5, "messages": [{"role": "user", "content": text}]}
    req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return str(json.load(resp)["choices"][0]["message"]["content"])


def probe(port: int) -> dict[str, object]:
    """What the jail lets us see and reach: interfaces, routes, and the host's loopback listener."""
    with open("/proc/net/dev") as f:  # per network namespace (unlike /sys/class/net, which is per mount)
        interfaces = sorted(line.split(":")[0].strip() for line in f.read().splitlines()[2:])
    result: dict[str, object] = {"interfaces": interfaces}
    with open("/proc/net/route") as f:
        result["routes"] = len(f.read().strip().splitlines()) - 1
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        result["host_listener"] = "reached"
    except OSError as exc:
        result["host_listener"] = type(exc).__name__
    return result


def main() -> int:
    base, mode = sys.argv[1], sys.argv[2]
    if mode == "work":
        answer = chat(base, sys.argv[3])
        with open("notes.txt") as f:
            notes = f.read()
        with open("made.txt", "w") as f:
            f.write(notes.upper())
        os.chmod("made.txt", 0o755)
        os.remove("old.txt")
        print(answer)
    elif mode == "probe":
        with open("probe.json", "w") as f:
            json.dump(probe(int(sys.argv[3])), f)
        chat(base, "probed")
    elif mode == "retry":  # a CLI that retries a failed model call, as real ones do
        try:
            chat(base, "first")
        except urllib.error.HTTPError:
            print(chat(base, "second"))
    elif mode == "exit":
        print("fake cli: giving up before calling the model", file=sys.stderr)
        return 3
    elif mode == "loop":
        try:
            while True:
                chat(base, "again")
        except urllib.error.HTTPError as exc:
            print(f"fake cli: stopped by HTTP {exc.code}", file=sys.stderr)
            return 1
    elif mode == "daemon":  # leaves a detached grandchild behind that would write a file later
        marker = sys.argv[3]
        if os.fork() == 0:
            os.setsid()
            open(marker + ".started", "w").close()  # proof that the grandchild ran at all
            time.sleep(0.6)
            open(marker, "w").close()
            os._exit(0)
        for _ in range(6000):  # the grandchild is running before the CLI goes on (and ends)
            if os.path.exists(marker + ".started"):
                break
            time.sleep(0.01)
        chat(base, "daemonized")
    elif mode == "sleep":
        time.sleep(60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
