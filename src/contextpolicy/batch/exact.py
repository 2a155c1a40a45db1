"""JSON values (Python objects, as a JSON reader gives them) into Arrow exactly, or a clear
refusal naming the value.

Arrow's conversion from Python objects changes some values on the way: a column whose values
are integers and fractions becomes ``double``, where an integer beyond 2**53 has no exact
double (Arrow refuses it, with no word of where it is); an integer beyond 64 bits fits no
column at all (a bare ``OverflowError``); a fraction put into an integer column is cut off
without a word. Here every such value is found and named (its row, its key path, the value and
what to do), and a value read back from Arrow is compared with the value given.

The rules, the same wherever JSON values become Arrow values:
- an integer goes into an ``int64`` column: -2**63 .. 2**63-1; beyond that it is refused
  (Parquet has no wider integer; a decimal or text column would change the column's type for
  every row);
- a field that holds integers and fractions is a ``double`` column (JSON has one kind of
  number), and each of its integers must be a double exactly: |n| <= 2**53, else it is
  refused;
- nothing else is converted: a value that reads back otherwise than it was given is refused.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from decimal import Decimal
from typing import Any, NamedTuple

__all__ = ["INT64", "MAX_EXACT_DOUBLE", "Unrepresentable", "first_difference",
           "find_unrepresentable"]

INT64 = (-(2**63), 2**63 - 1)
MAX_EXACT_DOUBLE = 2**53  # every integer up to this magnitude is a double exactly

_NUMBERS = (int, float, Decimal)
_KEEP = ("quote the number in the input (a string keeps every digit), or write JSONL, which "
         "keeps it exactly")


class Unrepresentable(NamedTuple):
    """A value the Arrow column it goes into cannot hold as it is."""

    row: int  # its row among the rows given
    path: str  # its key path in the row: ``messages[0].metadata.n``
    value: Any
    reason: str  # what the column cannot hold, and what to do

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


def _key_path(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _numbers(value: Any, path: str, kind: str) -> Iterator[tuple[str, str, Any]]:
    """``(key path, type path, number)`` for every number (not a boolean) in ``value``; the
    type path names a column as Arrow infers it (``[]`` for any item of a list)."""
    stack: list[tuple[Any, str, str]] = [(value, path, kind)]
    while stack:
        item, where, what = stack.pop()
        if type(item) is dict:
            for key, child in reversed(item.items()):
                stack.append((child, _key_path(where, key), _key_path(what, key)))
        elif type(item) is list:
            for i in range(len(item) - 1, -1, -1):
                stack.append((item[i], f"{where}[{i}]", f"{what}[]"))
        elif type(item) is int or type(item) is float:  # (a bool is not an int here)
            yield where, what, item


def _arrow_kinds(schema: Any) -> tuple[set[str], set[str]]:
    """The type paths of a schema's double columns and of its columns held as JSON text."""
    import pyarrow as pa

    floats: set[str] = set()
    texts: set[str] = set()

    def visit(t: Any, what: str) -> None:
        if isinstance(t, pa.BaseExtensionType):
            if t.extension_name == "arrow.json":
                texts.add(what)
            return
        if pa.types.is_floating(t):
            floats.add(what)
        elif pa.types.is_struct(t):
            for f in t:
                visit(f.type, _key_path(what, f.name))
        elif pa.types.is_list(t) or pa.types.is_large_list(t):
            visit(t.value_type, f"{what}[]")

    for field in schema:
        visit(field.type, field.name)
    return floats, texts


def find_unrepresentable(rows: list[Any], schema: Any = None) -> Unrepresentable | None:
    """The first value of ``rows`` (dicts, one per line) that no Arrow column holds as it is:
    an integer beyond 64 bits, or an integer beyond 2**53 in a double column (one the
    ``schema`` makes double, or, without a schema, a field that holds fractions too in
    ``rows``). ``None`` if every value fits."""
    floats: set[str] = set()
    if schema is not None:
        floats, _ = _arrow_kinds(schema)
    else:
        for row in rows:
            floats.update(what for _, what, number in _numbers(row, "", "")
                          if type(number) is float)
    for r, row in enumerate(rows):
        for where, what, number in _numbers(row, "", ""):
            if type(number) is not int:
                continue
            if not INT64[0] <= number <= INT64[1]:
                return Unrepresentable(r, where, number, (
                    f"the integer {number} does not fit a Parquet integer column (64 bits: "
                    f"{INT64[0]} to {INT64[1]}); {_KEEP}"))
            if what in floats and abs(number) > MAX_EXACT_DOUBLE:
                return Unrepresentable(r, where, number, (
                    f"the integer {number} is in a field that holds fractions too, so its "
                    f"column is double, and a double holds integers exactly only up to 2**53 "
                    f"({MAX_EXACT_DOUBLE}); {_KEEP}"))
    return None


def first_difference(given: Any, held: Any, path: str = "") -> tuple[str, Any, Any] | None:
    """The first value that ``held`` (read back from Arrow) holds otherwise than ``given``: its
    key path, the value given and the value held; ``None`` if there is none. A key ``given``
    lacks reads back as null (a struct holds every field of its type); a number reads back as
    the same number, integer or float (JSON has one kind of number); anything else reads back
    as it was given, of the same type."""
    if given is None or held is None:
        return None if given is held else (path, given, held)
    if type(given) is bool or type(held) is bool:
        return None if type(given) is type(held) and given == held else (path, given, held)
    if isinstance(given, _NUMBERS) and isinstance(held, _NUMBERS):
        if given == held:  # ints, floats and decimals compare exactly (2**53 + 1 != 2.0**53)
            return None
        both_nan = (isinstance(given, float) and isinstance(held, float)
                    and math.isnan(given) and math.isnan(held))
        return None if both_nan else (path, given, held)
    if isinstance(given, dict):
        if not isinstance(held, dict):
            return path, given, held
        for key in [*given, *(k for k in held if k not in given)]:
            found = first_difference(given.get(key), held.get(key), _key_path(path, str(key)))
            if found is not None:
                return found
        return None
    if isinstance(given, (list, tuple)):
        if not isinstance(held, (list, tuple)) or len(given) != len(held):
            return path, given, held
        for i, (a, b) in enumerate(zip(given, held, strict=True)):
            found = first_difference(a, b, f"{path}[{i}]")
            if found is not None:
                return found
        return None
    return None if type(given) is type(held) and given == held else (path, given, held)
