"""Names of a package that load on first use (PEP 562), so that importing the package costs
only what its first use needs."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping

TYPE_CHECKING = False  # typing itself is not worth importing here
if TYPE_CHECKING:
    from typing import Any


def lazy_exports(
    package: str, namespace: dict[str, Any], exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A module ``__getattr__`` and ``__dir__`` for ``package``: each name of ``exports`` (name ->
    relative module) is imported on first use and kept in ``namespace``."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __getattr__, __dir__
