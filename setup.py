"""Build the compiled kernel (``contextpolicy._kernel_c``) from ``csrc/``.

``CONTEXTPOLICY_PURE_PYTHON=1`` builds without compiling: the package then runs on its
pure-Python twin. A failed compile falls back to the twin loudly, except under cibuildwheel
(``CIBUILDWHEEL=1``) or with ``CONTEXTPOLICY_REQUIRE_EXTENSIONS=1``, where it stops the build so
that no wheel ships without its kernel by accident.
"""

import glob
import os
import platform
import runpy
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


def _flag(name):
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


PURE = _flag("CONTEXTPOLICY_PURE_PYTHON")
REQUIRE = _flag("CONTEXTPOLICY_REQUIRE_EXTENSIONS") or _flag("CIBUILDWHEEL")
CPYTHON = platform.python_implementation() == "CPython"


def _say(message):
    bar = "*" * 78
    print(f"\n{bar}\n{message}\n{bar}\n", file=sys.stderr, flush=True)


class BuildExt(build_ext):
    """Compile the kernel; on failure, fall back to the twin unless the build requires it."""

    def run(self):
        try:
            super().run()
        except Exception as exc:  # compiler missing, Cython missing, headers missing
            self._failed(exc)

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:
            self._failed(exc)

    def _failed(self, exc):
        if REQUIRE:
            _say(f"contextpolicy: compiling the kernel failed and extensions are required: {exc}")
            raise
        _say(
            "contextpolicy: WARNING: the compiled kernel could not be built "
            f"({type(exc).__name__}: {exc}).\n"
            "contextpolicy will install and work on its pure-Python twin, which is slower.\n"
            "Install a C compiler and Cython and reinstall for the compiled kernel."
        )


GENERATED = os.path.join("build", "generated")


def _tables_header():
    """Write the kernel's C header of tables from ``contextpolicy/_tables.py``, their one
    source; return the folder it is in."""
    tables = runpy.run_path(os.path.join("src", "contextpolicy", "_tables.py"))
    os.makedirs(GENERATED, exist_ok=True)
    path = os.path.join(GENERATED, "_tables.h")
    text = tables["c_header"]()
    old = None
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            old = f.read()
    if old != text:  # rewritten only when it changes, so an unchanged build stays cached
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    return GENERATED


def _compile_args():
    if sys.platform == "win32":
        return []
    # -g0 last: no debug information in the shipped module, whatever CFLAGS Python was built with.
    return ["-O3", "-g0"]


def _link_args():
    if sys.platform == "linux":
        return ["-Wl,--strip-debug"]
    if sys.platform == "darwin":
        return ["-Wl,-S"]
    return []


def extensions():
    if PURE:
        _say("contextpolicy: CONTEXTPOLICY_PURE_PYTHON is set: building the pure-Python package")
        return []
    if not CPYTHON:
        _say(f"contextpolicy: {platform.python_implementation()} detected: building pure-Python")
        return []
    try:
        from Cython.Build import cythonize
    except ImportError as exc:
        if REQUIRE:
            raise
        _say(f"contextpolicy: WARNING: {exc}; building the pure-Python package instead")
        return []
    _say("contextpolicy: building the compiled kernel (contextpolicy._kernel_c)")
    ext = Extension(
        "contextpolicy._kernel_c",
        ["csrc/_kernel_c.pyx"],
        include_dirs=["csrc", _tables_header()],
        depends=[os.path.join(GENERATED, "_tables.h"), *sorted(glob.glob("csrc/*.h")),
                 *sorted(glob.glob("csrc/*.pxi"))],
        extra_compile_args=_compile_args(),
        extra_link_args=_link_args(),
    )
    return cythonize([ext], compiler_directives={"language_level": 3}, quiet=True)


setup(
    ext_modules=extensions(),
    cmdclass={"build_ext": BuildExt},
)
