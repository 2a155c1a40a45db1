"""The repository's build configuration: which wheels cibuildwheel builds, the Cython pin, the
wheel workflow, and what the wheel tests need. These read the source tree (pyproject.toml,
build-constraints.txt, .github/) and run cibuildwheel, so they are marked ``packaging`` and are
deselected where a wheel is tested against its installed package. Their tools (tomllib, yaml,
cibuildwheel) are imported where they are used, so that collecting this module needs none."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

pytestmark = pytest.mark.packaging

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW_PATH = ROOT / ".github" / "workflows" / "wheels.yml"

PYTHONS = ["cp310", "cp311", "cp312", "cp313", "cp314"]
INTENDED = {
    "linux": {
        f"{py}-{libc}_{arch}"
        for py in PYTHONS
        for libc in ("manylinux", "musllinux")
        for arch in ("x86_64", "aarch64")
    },
    "macos": {f"{py}-macosx_{arch}" for py in PYTHONS for arch in ("x86_64", "arm64")},
    "windows": {f"{py}-win_amd64" for py in PYTHONS},
}


@pytest.fixture(scope="module")
def pyproject() -> dict[str, Any]:
    import tomllib  # Python 3.11+, like cibuildwheel itself

    return tomllib.loads((ROOT / "pyproject.toml").read_text())


@pytest.fixture(scope="module")
def cibw(pyproject: dict[str, Any]) -> dict[str, Any]:
    return pyproject["tool"]["cibuildwheel"]


@pytest.fixture(scope="module")
def workflow() -> dict[str, Any]:
    import yaml

    return yaml.safe_load(WORKFLOW_PATH.read_text())


def cibuildwheel(*args: str) -> subprocess.CompletedProcess[str]:
    # The configuration in pyproject.toml alone: no CIBW_* variable of the caller leaks in.
    env = {k: v for k, v in os.environ.items() if not k.startswith("CIBW_")}
    return subprocess.run(
        [sys.executable, "-m", "cibuildwheel", *args], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=120,
    )


@pytest.mark.parametrize("platform", sorted(INTENDED))
def test_cibuildwheel_builds_exactly_the_intended_wheels(platform):
    result = cibuildwheel("--print-build-identifiers", "--platform", platform)
    assert result.returncode == 0, result.stderr
    identifiers = result.stdout.split()
    assert len(identifiers) == len(set(identifiers))
    assert set(identifiers) == INTENDED[platform]


def test_build_constraints_pin_cython_within_the_build_requirements(pyproject, cibw):
    ranges = {Requirement(r).name.lower(): Requirement(r) for r in pyproject["build-system"]["requires"]}
    pins = {}
    for line in (ROOT / "build-constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            (spec,) = req.specifier  # exactly one clause: a pin
            assert spec.operator == "==", f"{line}: constraints pin exact versions"
            pins[req.name.lower()] = spec.version
    assert "cython" in pins
    for name, version in pins.items():
        assert name in ranges, f"{name} is pinned but is not a build requirement"
        assert ranges[name].specifier.contains(version), f"{name}=={version} is outside {ranges[name]}"
    # The wheels are built with those pins: cibuildwheel's frontend reads the file.
    assert cibw["build-frontend"] == {
        "name": "build", "args": ["--dependency-constraints-txt=build-constraints.txt"],
    }
    # The sdist carries the file, so a build from the sdist finds it.
    assert "build-constraints.txt" in (ROOT / "MANIFEST.in").read_text()


def test_wheel_tests_assert_the_compiled_kernel_and_skip_only_benchmarks_and_packaging(cibw):
    command = " && ".join(cibw["test-command"])
    assert "kernel_info()['compiled']" in command
    assert "pytest {project}/tests " in command and '-m "not packaging and not extras"' in command
    assert "benchmarks" not in command
    assert "pp*" in cibw["skip"]  # PyPy installs the pure wheel


def _third_party_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    local = {"contextpolicy", "tests", "benchmarks", "conftest"}
    return {n for n in names - local if n not in sys.stdlib_module_names}


def _wheel_test_files() -> list[Path]:
    """The files the suite runs against a wheel: the conftests, the test modules not marked
    ``packaging`` (the build configuration) or ``extras`` (the optional extras), and the
    support modules they import, and those import."""
    tests = ROOT / "tests"
    files = [ROOT / "conftest.py", *sorted(tests.rglob("conftest.py"))]
    for path in sorted(tests.rglob("test_*.py")):
        if not re.search(r"^pytestmark = \[?pytest\.mark\.(packaging|extras)\b",
                         path.read_text(), re.M):
            files.append(path)
    support = {p.stem: p for p in (tests / "support").glob("*.py")}
    at = 0
    while at < len(files):
        for node in ast.walk(ast.parse(files[at].read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
                for name in names:
                    parts = name.split(".")
                    stem = parts[-1]
                    within = files[at].parent.name == "support" and node.level == 1
                    if (name.startswith("tests.support.") or within) and stem in support:
                        if support[stem] not in files:
                            files.append(support[stem])
        at += 1
    return files


def test_the_wheel_tests_are_found_with_their_support():
    names = {p.relative_to(ROOT).as_posix() for p in _wheel_test_files()}
    assert {"tests/kernel/test_kernel.py", "tests/support/strategies.py", "tests/support/cli.py",
            "tests/support/hostile.py", "tests/conftest.py", "conftest.py"} <= names
    # the optional extras' suites, and what only they use, are left to their own run
    assert "tests/batch/test_ray.py" not in names and "tests/support/ray.py" not in names


def test_test_requires_cover_every_import_of_the_wheel_tests(pyproject, cibw):
    provided = {Requirement(r).name.lower() for r in cibw["test-requires"]}
    provided |= {Requirement(r).name.lower() for r in pyproject["project"]["dependencies"]}
    # What those requirements bring with them (pytest brings packaging, langchain-core brings
    # pyyaml, ...): the distributions installed here, and their own requirements, one level.
    for name in list(provided):
        for req in metadata.requires(name) or []:
            parsed = Requirement(req)
            if parsed.marker is None or parsed.marker.evaluate({"extra": ""}):
                provided.add(parsed.name.lower())
    dists = metadata.packages_distributions()
    for path in _wheel_test_files():
        for module in sorted(_third_party_imports(path)):
            owners = {d.lower().replace("_", "-") for d in dists.get(module, [module])}
            assert owners & provided, f"{path.name} imports {module}, which test-requires lacks"


def test_workflow_is_a_valid_github_workflow():
    result = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows",
         str(WORKFLOW_PATH)], capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_workflow_builds_every_intended_architecture_on_a_native_runner(workflow, cibw):
    jobs = workflow["jobs"]
    matrix = jobs["wheels"]["strategy"]["matrix"]["include"]
    platform_of = {"ubuntu": "linux", "macos": "macos", "windows": "windows"}
    built: dict[str, set[str]] = {}
    for entry in matrix:
        platform = platform_of[entry["os"].split("-")[0]]
        built.setdefault(platform, set()).add(entry["archs"])
    for platform in INTENDED:
        assert built[platform] == set(cibw[platform]["archs"]), platform
    steps = jobs["wheels"]["steps"]
    (cibw,) = [s for s in steps if s.get("uses", "").startswith("pypa/cibuildwheel@")]
    # Wheels are built from the sdist of the first job, never from a checkout.
    assert cibw["with"]["package-dir"] == "${{ steps.sdist.outputs.path }}"
    assert cibw["env"]["CIBW_ARCHS"] == "${{ matrix.archs }}"
    assert not [s for s in steps if s.get("uses", "").startswith("actions/checkout")]
    assert jobs["wheels"]["needs"] == "sdist"
    # The cibuildwheel run in CI is the version this configuration was checked with.
    assert cibw["uses"].split("@v")[1] == metadata.version("cibuildwheel")


def test_workflow_builds_the_sdist_and_the_pure_wheel_once(workflow):
    steps = workflow["jobs"]["sdist"]["steps"]
    runs = "\n".join(s.get("run", "") for s in steps)
    assert "python -m build --sdist --dependency-constraints-txt build-constraints.txt" in runs
    (pure,) = [s for s in steps if s.get("env", {}).get("CONTEXTPOLICY_PURE_PYTHON") == "1"]
    assert "python -m build --wheel" in pure["run"] and "-py3-none-any.whl" in pure["run"]


def test_workflow_publishes_on_tags_with_trusted_publishing(workflow):
    jobs = workflow["jobs"]
    publish = jobs["publish"]
    assert set(publish["needs"]) == {"sdist", "wheels"}
    assert "startsWith(github.ref, 'refs/tags/v')" in publish["if"]
    assert publish["permissions"] == {"id-token": "write"}
    assert publish["environment"]["name"] == "pypi"
    uses = [s.get("uses", "") for s in publish["steps"]]
    assert any(u.startswith("pypa/gh-action-pypi-publish@") for u in uses)
    # No stored token: trusted publishing only.
    assert "password" not in str(publish["steps"]) and "secrets." not in WORKFLOW_PATH.read_text()
    # Every uploaded artifact is downloaded for publishing.
    (download,) = [s for s in publish["steps"] if s.get("uses", "").startswith("actions/download")]
    pattern = download["with"]["pattern"].rstrip("*")
    uploads = [s["with"]["name"] for job in ("sdist", "wheels") for s in jobs[job]["steps"]
               if s.get("uses", "").startswith("actions/upload-artifact")]
    assert len(uploads) == 2 and all(name.startswith(pattern) for name in uploads)
    assert workflow["permissions"] == {"contents": "read"}
