"""Guards against a silent fallback to the twin, and against the twins drifting apart."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

PROBE = "import contextpolicy, json; print(json.dumps(contextpolicy.kernel_info()))"


def _kernel_info(**env: str) -> dict:
    environ = {k: v for k, v in os.environ.items() if k != "CONTEXTPOLICY_PURE_PYTHON"}
    environ.update(env)
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=environ, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


@pytest.mark.c_extension
def test_default_import_picks_the_compiled_kernel():
    info = _kernel_info()
    assert info["compiled"] is True
    assert info["implementation"] == "cython"


@pytest.mark.parametrize("value", ["1", "true", "yes"])
def test_env_var_forces_the_twin(value):
    info = _kernel_info(CONTEXTPOLICY_PURE_PYTHON=value)
    assert info == {"compiled": False, "implementation": "python", "pure_python_requested": True}


@pytest.mark.parametrize("value", ["", "0", "false"])
@pytest.mark.c_extension
def test_env_var_off_values_keep_the_compiled_kernel(value):
    assert _kernel_info(CONTEXTPOLICY_PURE_PYTHON=value)["compiled"] is True


def test_reports_name_the_live_kernel():
    import contextpolicy

    result = contextpolicy.process_context(
        {"fragments": [{"id": "q", "kind": "question", "text": "hi"}]}, {"mode": "validate"}
    )
    assert result.report.kernel == contextpolicy.kernel_info()["implementation"]


@pytest.mark.c_extension
def test_both_modules_export_the_same_names(kernels):
    c, py = kernels
    assert sorted(c.__all__) == sorted(py.__all__)
    for name in py.__all__:
        assert hasattr(c, name), name
        assert callable(getattr(c, name)) == callable(getattr(py, name)), name
    assert (c.GROUP_USER_TURN, c.GROUP_MESSAGE) == (py.GROUP_USER_TURN, py.GROUP_MESSAGE)
    assert (c.IMPLEMENTATION, py.IMPLEMENTATION) == ("cython", "python")


def test_the_chooser_exposes_every_kernel_function(kernel):
    from contextpolicy import _kernel

    for name in kernel.__all__:
        assert hasattr(_kernel, name), name
