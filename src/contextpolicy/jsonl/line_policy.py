"""What the line runner must know of a policy before it reads a line, kept on disk by the
policy's bytes, so that a run whose lines all take the byte path starts without pydantic.

A JSONL run reads most lines as bytes (``_kernel.reduce_lines``), which needs a few facts of
the policy: the trims (the byte path's steps), the trigger, the watermark, whether it reduces,
and the template of a line's report entry. Finding them means validating the policy, and
pydantic's models cost a command several times what its one-line run costs. So the facts of a
valid policy are written to a small JSON file named by a digest of the policy's canonical JSON,
the live kernel, and the files of the package and pydantic's version, and read from there by
the next run of the same policy: a policy that changes by a byte, or a contextpolicy or pydantic
that changes, misses and is validated again. An invalid policy is never kept (its errors come
from validation, every time); a policy that is not plain JSON (YAML's dates or aliases beyond
``MAX_NODES`` values) is validated every time. A file that cannot be read or written, is not a
regular file of this user's that no one else may write, or does not hold byte for byte what
would be written, is validation again. The folder is made for its user alone, and is trusted as
the user's own files are (as Python trusts its bytecode cache): the cache changes no result,
only when pydantic is imported.

Where: ``CONTEXTPOLICY_CACHE_DIR`` when it is set (``off``, ``none``, ``0``, ``false``, ``no``
or empty: no cache), else the user's cache folder (``$XDG_CACHE_HOME`` or ``~/.cache`` on
Linux, ``~/Library/Caches`` on macOS, ``%LOCALAPPDATA%`` on Windows), under
``contextpolicy/policies``.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

try:  # hashlib's own blake2b, without loading OpenSSL (hashlib's import does)
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - an interpreter without it
    from hashlib import blake2b

import orjson

__all__ = ["CACHE_VARIABLE", "LinePolicy", "cache_folder", "line_policy"]

CACHE_VARIABLE = "CONTEXTPOLICY_CACHE_DIR"
FORMAT = 2  # of the files: a file of another format is a miss
# The package's own files (its modules and the compiled kernel) and pydantic's version decide
# what a valid policy's facts are: a change to any of them is a change of key.
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_NODES = 10_000  # values in a policy kept: a larger one (YAML's aliases) is never keyed
MAX_FILE = 1 << 20  # bytes of a cache file read
# Turn the cache off: CONTEXTPOLICY_CACHE_DIR set to one of these (or empty).
OFF = ("off", "none", "0", "false", "no")


class LinePolicy(NamedTuple):
    """The facts of a valid policy the line runner needs before any line."""

    # (fragment id, grouping code, keep_groups, target_chars) of each trim of the byte path;
    # None when lines cannot take it (every line is parsed and run as objects)
    steps: tuple[tuple[str, int, int, int], ...] | None
    trigger: int  # chars, -1: none
    watermark: int  # chars, -1: none
    reduces: bool  # a reduce policy (a validate reaches no target)
    # (JSON path, id) of every handlerId the policy names
    handlers: tuple[tuple[str, str], ...]
    # the template of a line's report entry for _kernel.report_lines (the programs of
    # templates.FusedReports.entry_template), or None (no byte path, or no template)
    entry: tuple[Any, ...] | None = None


def cache_folder() -> str | None:
    """Where validated policies' facts are kept, or ``None`` when the cache is off."""
    chosen = os.environ.get(CACHE_VARIABLE)
    if chosen is not None:
        if chosen.strip().lower() in ("", *OFF):
            return None
        return os.path.join(os.path.expanduser(chosen), "policies")
    home = os.path.expanduser("~")
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or os.path.join(home, "AppData", "Local")
        return os.path.join(base, "contextpolicy", "Cache", "policies")
    if sys.platform == "darwin":
        return os.path.join(home, "Library", "Caches", "contextpolicy", "policies")
    base = os.environ.get("XDG_CACHE_HOME") or ""
    return os.path.join(base if os.path.isabs(base) else os.path.join(home, ".cache"),
                        "contextpolicy", "policies")


def _code_stamp() -> bytes:
    # The size and modification time of every file of the package (its modules, the compiled
    # kernel), and pydantic's version file: about a hundred stat calls, a tenth of a ms.
    parts = []
    folders = [_PACKAGE]
    while folders:
        folder = folders.pop()
        with os.scandir(folder) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                if entry.is_dir(follow_symlinks=False):
                    if entry.name != "__pycache__" and entry.name != "examples":
                        folders.append(entry.path)
                elif entry.name.endswith((".py", ".so", ".pyd")):
                    st = entry.stat()
                    parts.append(b"%s:%d:%d" % (os.path.relpath(entry.path, _PACKAGE).encode(
                        "utf-8", "surrogateescape"), st.st_size, st.st_mtime_ns))
    parts.append(b"pydantic:" + _pydantic_version())
    return b";".join(parts)


def _pydantic_version() -> bytes:
    # The bytes of pydantic's version.py, read without importing pydantic.
    from importlib.util import find_spec

    spec = find_spec("pydantic")
    folder = os.path.dirname(spec.origin) if spec is not None and spec.origin else None
    if folder is None:
        return b"?"
    with open(os.path.join(folder, "version.py"), "rb") as f:
        return f.read()


def _plain(value: Any) -> bool:
    # Only JSON's own types, exactly (each writes JSON no other value writes), finite floats,
    # string keys, at most MAX_NODES values (YAML's aliases can make a few lines millions).
    stack, seen = [value], 0
    while stack:
        item = stack.pop()
        seen += 1
        if seen > MAX_NODES:
            return False
        kind = type(item)
        if kind is str or kind is bool or kind is int or item is None:
            continue
        if kind is float:
            if item - item != 0.0:  # NaN or infinite
                return False
        elif kind is dict:
            if not all(type(k) is str for k in item):
                return False
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
        else:
            return False
    return True


def _key(policy: Any) -> str | None:
    """The digest naming ``policy``'s file: its canonical JSON (keys sorted), the format, the
    live kernel and the code that validates it. ``None`` for a document that is not plain JSON
    (YAML's dates, a subclass, NaN): another value would write the same JSON, so it is
    validated every time."""
    from .. import __version__, _kernel

    if not _plain(policy):
        return None
    try:
        canonical = orjson.dumps(policy, option=orjson.OPT_SORT_KEYS)
        stamp = _code_stamp()
    except (TypeError, OSError):  # an integer beyond 64 bits; a module that cannot be read
        return None
    digest = blake2b(digest_size=20)
    # The live kernel too: a report names the kernel that wrote it, and so does its template.
    kernel = str(_kernel.kernel_info()["implementation"]).encode()
    for part in (b"contextpolicy line policy %d" % FORMAT, __version__.encode(), kernel, stamp,
                 canonical):
        digest.update(b"%d:" % len(part) + part)
    return digest.hexdigest()


def _read(path: str) -> LinePolicy | None:
    # A regular file of this user's that no one else may write, read back byte for byte as it
    # was written; anything else (a link, a pipe, someone else's file, a broken one) is a miss.
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except (OSError, ValueError):
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FILE or not _own(st):
            return None
        raw = os.read(fd, MAX_FILE + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        doc = orjson.loads(raw)
        steps = doc["steps"]
        facts = LinePolicy(
            None if steps is None else tuple(
                (str(s[0]), int(s[1]), int(s[2]), int(s[3])) for s in steps),
            int(doc["trigger"]), int(doc["watermark"]), bool(doc["reduces"]),
            tuple((str(p), str(n)) for p, n in doc["handlers"]),
            None if doc["entry"] is None else (
                _program(doc["entry"][0]), tuple(map(_program, doc["entry"][1])),
                tuple(map(_program, doc["entry"][2]))))
    except Exception:  # a file that is not one of ours, or broken: a miss
        return None
    if raw != orjson.dumps(_document(facts)):  # every byte what was written
        return None
    return facts


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def _own(st: os.stat_result) -> bool:
    # This user's, and writable by no one else (POSIX; Windows has neither notion here).
    if not hasattr(os, "getuid"):
        return True
    return st.st_uid == os.getuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _program(written: list[Any]) -> tuple[Any, ...]:
    # A program of the entry template: its pieces of bytes (written as UTF-8 strings: a report
    # is UTF-8) and the slot codes (ints) between them.
    return tuple(p.encode("utf-8") if type(p) is str else int(p) for p in written)


def _written(program: tuple[Any, ...]) -> list[Any]:
    return [p.decode("utf-8") if type(p) is bytes else p for p in program]


def _document(facts: LinePolicy) -> dict[str, Any]:
    entry = facts.entry
    return {"format": FORMAT,
            "steps": None if facts.steps is None else [list(s) for s in facts.steps],
            "trigger": facts.trigger, "watermark": facts.watermark, "reduces": facts.reduces,
            "handlers": [list(h) for h in facts.handlers],
            "entry": None if entry is None else [
                _written(entry[0]), [_written(p) for p in entry[1]],
                [_written(p) for p in entry[2]]]}


def _write(path: str, facts: LinePolicy) -> None:
    # Written whole to a new file of a random name (never through a link planted there), then
    # renamed into place: a reader sees the old file, none, or the new one. The folder is made
    # for this user alone. One that cannot be made or written is no cache, and no error.
    folder = os.path.dirname(path)
    temp = os.path.join(folder, f".{os.urandom(8).hex()}.tmp")
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600)
    except (OSError, ValueError):  # ValueError: a NUL in the folder's name
        return
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(orjson.dumps(_document(facts)))
        os.replace(temp, path)
    except OSError:
        try:
            os.unlink(temp)
        except OSError:
            pass


def validated_facts(policy: Any, handlers: Mapping[str, Callable[..., Any]] | None,
                    ) -> tuple[LinePolicy, Any]:
    """The facts of ``policy`` found by validating it (a ``ContextPolicyError`` when it is not
    valid), and the :class:`~contextpolicy.prepared.PreparedPolicy` they come from."""
    from ..plan import PROTECTED_KINDS
    from ..policy import ReducePolicy, validate_context_policy
    from ..policy.validation import references
    from ..prepared import PreparedPolicy
    from .templates import FusedReports

    typed = validate_context_policy(policy)
    prepared = PreparedPolicy.of_valid(typed, dict(handlers or {}), None)
    path = prepared.transcript_path
    named = tuple((ref.path, ref.name) for ref in references(typed)
                  if ref.what == "handler" and isinstance(ref.name, str))
    facts = LinePolicy(
        None if path is None else tuple(tuple(s) for s in path.steps),  # type: ignore[misc]
        path.trigger_chars if path is not None else -1,
        path.watermark_chars if path is not None else -1,
        type(typed) is ReducePolicy, named,
        None if path is None else FusedReports(prepared, transcript_kinds(PROTECTED_KINDS))
        .entry_template())
    return facts, prepared


def transcript_kinds(protected: frozenset[str]) -> dict[str, tuple[str, bool]]:
    """The fragments a transcript is split into: their kinds, and whether each is protected."""
    return {fid: (fid, fid in protected) for fid in ("system", "history", "question")}


def line_policy(policy: Any, handlers: Mapping[str, Callable[..., Any]] | None = None,
                ) -> tuple[LinePolicy, Any]:
    """The facts of ``policy`` (a document) for the line runner, and its prepared policy when
    it had to be validated for them (``None`` when they came from the cache). Raises
    ``ContextPolicyError`` for a policy that is not valid."""
    folder = cache_folder()
    key = _key(policy) if folder is not None and not handlers else None
    if key is not None and folder is not None:
        found = _read(os.path.join(folder, f"{key}.json"))
        if found is not None:
            return found, None
    facts, prepared = validated_facts(policy, handlers)
    if key is not None and folder is not None:
        _write(os.path.join(folder, f"{key}.json"), facts)
    return facts, prepared
