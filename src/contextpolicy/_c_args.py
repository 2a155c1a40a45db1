"""The compiled kernel's typed arguments, converted the way Cython converts them.

The compiled kernel's typed arguments (C int, int64_t, Py_ssize_t, tuple, bint) are converted
by Cython's rules before its body runs; the twin's modules convert theirs with these helpers, in
the same order, so that both kernels accept and refuse the same values with the same errors.
Compiled counterpart: the argument declarations of each function in ``csrc/``.
"""

from __future__ import annotations

import array
import operator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # numpy is imported where an array is made, never with the kernel
    import numpy as np
    import numpy.typing as npt

    Int64Array = npt.NDArray[np.int64]
else:
    Int64Array = Any

# The compiled kernel's typed arguments (C int, int64_t, Py_ssize_t, tuple, bint) are converted
# by Cython's rules before its body runs; the twin converts its arguments the same way, in the
# same order, so that both accept and refuse the same values with the same errors.
_C_INT = (-(2**31), 2**31 - 1)
_C_LONG = (-(2**63), 2**63 - 1)


def c_int(value: Any, ctype: str = "int64_t") -> int:
    """``value`` as a C ``int``, ``int64_t`` or ``Py_ssize_t`` argument of the compiled kernel:
    an int (a bool, an int subclass) as it is; for the others ``__index__`` (``Py_ssize_t``)
    or ``__int__`` (a float truncates); out of range, an OverflowError."""
    if ctype == "Py_ssize_t":
        value = operator.index(value)
        if not _C_LONG[0] <= value <= _C_LONG[1]:
            raise OverflowError("Python int too large to convert to C ssize_t")
        return int.__int__(value)
    if not isinstance(value, int):
        convert = getattr(type(value), "__int__", None)
        if convert is None:
            raise TypeError("an integer is required")
        value = convert(value)
        if not isinstance(value, int):
            raise TypeError(f"__int__ returned non-int (type {type(value).__name__})")
    value = int.__int__(value)
    if not _C_LONG[0] <= value <= _C_LONG[1]:
        raise OverflowError("Python int too large to convert to C long")
    if ctype == "int" and not _C_INT[0] <= value <= _C_INT[1]:
        raise OverflowError("value too large to convert to int")
    return value


def c_type_name(t: type) -> str:
    # The C tp_name: a class's name; a static type's dotted one (numpy.float64).
    if t.__flags__ & (1 << 9) or t.__module__ == "builtins":  # Py_TPFLAGS_HEAPTYPE
        return t.__name__
    return f"{t.__module__}.{t.__name__}"


def c_tuple(value: Any, name: str) -> Any:
    """A ``tuple`` argument of the compiled kernel: exactly a tuple, or None."""
    if value is not None and type(value) is not tuple:
        raise TypeError(f"Argument '{name}' has incorrect type (expected tuple, got "
                        f"{c_type_name(type(value))})")
    return value


def c_array(value: Any, dtype: Any) -> Any:
    """A ``const T[::1]`` argument filled from ``np.ascontiguousarray(value, dtype)`` (which
    makes a scalar 1-d): it must then be 1-d."""
    import numpy as np

    array = np.ascontiguousarray(value, dtype=dtype)
    if array.ndim != 1:
        raise ValueError(f"Buffer has wrong number of dimensions (expected 1, got {array.ndim})")
    return array


def c_int64_copy(value: Any) -> Any:
    """A private int64 copy of ``value`` as the compiled kernel's line functions take it: a
    list as ``array.array("q", ...)`` converts it, anything else as numpy's
    ``ascontiguousarray`` (then 1-d)."""
    if type(value) is list:
        return array.array("q", value)
    import numpy as np

    return np.array(c_array(value, np.int64), copy=True)


def c_unpack(value: Any, n: int) -> list[Any]:
    """``a, b, ... = value`` as the compiled kernel unpacks it (its errors' words)."""
    items: list[Any] = []
    for item in value:
        if len(items) == n:
            raise ValueError(f"too many values to unpack (expected {n})")
        items.append(item)
    if len(items) < n:
        raise ValueError(f"need more than {len(items)} value{'' if len(items) == 1 else 's'} "
                         "to unpack")
    return items
