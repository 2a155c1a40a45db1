"""Which message an adapter was given each message of a result's input stands for.

The core hands a compress handler copies, and keeps copies of what it returns, so after a
compress step no message of the fragment is the object the adapter gave, even where the handler
changed nothing. A framework needs its own objects back (LangChain's ids, metadata and
artifacts; the OpenAI Agents SDK tracks the items it sent by identity), so every message of the
input is traced to the given message it stands for:

- the very object, or one with the same content as the model sees it
  (:func:`~contextpolicy.content.snapshot`), matched in order from the newest back: the given
  message is handed back as it is (``Origin(i, unchanged=True)``);
- between two of those, a message a handler changed (``Origin(i, unchanged=False)``): the given
  message at its place when the handler returned as many messages there as it was given, each
  with the same :func:`identity` (type, role, name and tool ids, which handlers never change).
  Where the counts differ, a summary (:func:`~contextpolicy.handlers.is_summary`) stands for a
  run of messages: the messages before it stand, one for one, for the first given ones there,
  and those after it (the groups a summary keeps verbatim, which an earlier step may have
  changed) for the last ones, as long as their identities agree; any other message is traced
  only by its tool ids, to the given message with the same ids (a handler that merged or
  dropped messages says nothing else about which is which);
- anything else is new (``None``): a summary (always new, whatever it resembles), or a message
  that no given one stands behind.

The oldest messages a trim removed before any compress step removed messages (a summary) are
never a changed message's origin (:func:`trimmed_away`), so a message a handler changed right
after a trim is traced to itself, not to a message the trim dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Sequence
from itertools import pairwise
from typing import Any, NamedTuple

from .._tables import TOOL_USE_PART
from ..content import snapshot
from ..handlers.summary import is_summary

__all__ = ["Origin", "identity", "origins", "trimmed_away"]


class Origin(NamedTuple):
    """``source``: the index of the given message a message of the input stands for;
    ``unchanged``: whether it has that message's content unchanged."""

    source: int
    unchanged: bool


# Keys whose values say which message, or which tool call, a message is.
_ID_KEYS = ("tool_call_id", "call_id", "id")


def identity(message: Any) -> tuple[Any, ...] | None:
    """What a handler keeps of a message it changes: its type, role and name, and the ids that
    pair tool calls with their results (``tool_call_id``, ``call_id``, a Responses item's
    ``id``, the ids of its ``tool_calls`` and ``tool_use`` blocks). ``None`` for a summary, and
    for anything that is not a dict.

    Read from the real storage and made of exact strs (a str subclass by its text, any other
    object by its identity, as :func:`~contextpolicy.content.plain_copy` shares it), so no
    method of the message's values runs and the key of a copy is the key of its original."""
    if type(message) is not dict or is_summary(message):
        return None
    calls: list[Any] = []
    tool_calls = message.get("tool_calls")
    if isinstance(tool_calls, list):
        calls += [_plain(dict.get(c, "id")) if isinstance(c, dict) else None
                  for c in list.copy(tool_calls)]
    content = message.get("content")
    if isinstance(content, list):
        calls += [_plain(dict.get(p, "id")) for p in list.copy(content)
                  if isinstance(p, dict) and _is(dict.get(p, "type"), TOOL_USE_PART)]
    return (_plain(message.get("type")), _plain(message.get("role")),
            _plain(message.get("name")), *(_plain(message.get(k)) for k in _ID_KEYS),
            tuple(calls))


def _plain(value: Any) -> Any:
    if value is None or type(value) is str:
        return value
    if isinstance(value, str):
        return str.__str__(value)
    return ("object", id(value))


def _is(value: Any, text: str) -> bool:
    return isinstance(value, str) and str.__eq__(value, text) is True


def _has_ids(key: tuple[Any, ...]) -> bool:
    return any(v is not None for v in key[3:3 + len(_ID_KEYS)]) or bool(key[-1])


def origins(
    given: Sequence[Any], returned: Sequence[Any],
    away: Callable[[], Container[int]] | None = None,
) -> list[Origin | None]:
    """For each message of ``returned``, the message of ``given`` it stands for (see the module
    docstring). ``away`` gives the indices of ``given`` that are no changed message's origin
    (:func:`trimmed_away`); it is called only when some message is not a given one."""
    at = {id(m): i for i, m in enumerate(given)}
    out: list[Origin | None] = [None] * len(returned)
    for j, message in enumerate(returned):
        i = at.get(id(message))
        if i is not None:
            out[j] = Origin(i, True)
    if all(o is not None for o in out):
        return out
    # Same content, matched from the newest back: what a handler keeps verbatim is the newest
    # part (a summary's kept groups, what a trim left), so a message that also appears among
    # the older ones it replaced is the newer one.
    by_content: dict[Any, list[int]] = {}
    for i, message in enumerate(given):
        by_content.setdefault(snapshot(message), []).append(i)
    anchors: list[tuple[int, int]] = []  # (position in returned, index in given), newest first
    last = len(given)
    for j in reversed(range(len(returned))):
        found = out[j]
        if found is None:
            same = by_content.get(snapshot(returned[j]))
            while same and same[-1] >= last:
                same.pop()
            if not same:
                continue
            found = out[j] = Origin(same.pop(), True)
        if found.source < last:
            anchors.append((j, found.source))
            last = found.source
    traced = {o.source for o in out if o is not None}
    gone: Container[int] | None = None
    # Between two anchors, the changed messages and the given ones they may stand for.
    bounds = [(-1, -1), *reversed(anchors), (len(returned), len(given))]
    for (j0, i0), (j1, i1) in pairwise(bounds):
        changed = [j for j in range(j0 + 1, j1) if out[j] is None]
        if changed:
            if gone is None:
                gone = away() if away is not None else ()
            sources = [i for i in range(i0 + 1, i1) if i not in traced and i not in gone]
            _trace(given, returned, changed, sources, out)
    return out


def _trace(given: Sequence[Any], returned: Sequence[Any], changed: list[int],
           sources: list[int], out: list[Origin | None]) -> None:
    """Trace the ``changed`` positions of one gap to the given ``sources`` of the same gap."""
    if not sources:
        return
    keys = [identity(returned[j]) for j in changed]
    source_keys = [identity(given[i]) for i in sources]
    if len(changed) == len(sources) and all(
        k is not None and k == s for k, s in zip(keys, source_keys, strict=True)
    ):
        for j, i in zip(changed, sources, strict=True):
            out[j] = Origin(i, False)
        return
    # A summary stands for a run of messages: what the handler returned before the first one
    # stands for the first messages of the gap, what it returned after the last one for the
    # last (a summary's kept groups), one for one while their identities agree.
    first, last = 0, len(changed)  # changed[:first] and changed[last:] are traced by place
    lo, hi = 0, len(sources)  # sources[lo:hi] are left for the others
    summaries = [n for n, key in enumerate(keys) if key is None]
    if summaries:
        while first < summaries[0] and lo < hi and keys[first] == source_keys[lo]:
            out[changed[first]] = Origin(sources[lo], False)
            first, lo = first + 1, lo + 1
        while last - 1 > summaries[-1] and hi > lo and keys[last - 1] == source_keys[hi - 1]:
            out[changed[last - 1]] = Origin(sources[hi - 1], False)
            last, hi = last - 1, hi - 1
    # The others (a handler that merged or dropped messages): only tool ids say which message
    # is which, the newest first, as above.
    by_key: dict[tuple[Any, ...], list[int]] = {}
    for i, key in zip(sources[lo:hi], source_keys[lo:hi], strict=True):
        if key is not None and _has_ids(key):
            by_key.setdefault(key, []).append(i)
    bound = len(given)
    for n in reversed(range(first, last)):
        key = keys[n]
        candidates = by_key.get(key) if key is not None else None
        while candidates and candidates[-1] >= bound:
            candidates.pop()
        if candidates:
            bound = candidates.pop()
            out[changed[n]] = Origin(bound, False)


def trimmed_away(fragments: Iterable[tuple[str, Sequence[Any]]], steps: Iterable[Any],
                 given: Sequence[Any]) -> set[int]:
    """Indices of ``given`` that trims removed while the fragment's messages still stood, one
    for one, for the given ones: the oldest messages of each fragment that its applied trim
    steps removed before (and between) compress steps that kept its count of messages.

    ``fragments``: each fragment's id and messages (the dicts of ``given`` it holds);
    ``steps``: the report's steps, in order."""
    at = {id(m): i for i, m in enumerate(given)}
    first: dict[str, int] = {}
    for fid, messages in fragments:
        for m in messages:
            i = at.get(id(m))
            if i is not None:
                first[fid] = i
                break
    removed: dict[str, int] = {}
    lost: set[str] = set()
    for step in steps:
        fid = step.fragment_id
        if step.status != "applied" or fid in lost:
            continue
        if step.kind == "trim":
            removed[fid] = removed.get(fid, 0) + step.messages_removed
        elif step.messages_removed:  # a compress that dropped messages: places are lost
            lost.add(fid)
    return {i for fid, n in removed.items() if fid in first
            for i in range(first[fid], first[fid] + n)}
