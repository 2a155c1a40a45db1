"""The cache-stable cut: the input a model call gets is what a persisted reduction would hold.

A provider's prompt cache bills a repeated prefix at a fraction of new input. A reduction
recomputed from the whole history on every call (the plain cut) is past its trigger on every
call and cuts to its target at a new place each time, so the prefix never repeats. The stable
cut gives each call the input a persisted reduction would hold had the policy run before every
earlier model call and this one: an earlier call's input is the messages before each model
output (a run of assistant messages, or of Responses ``function_call``/``reasoning`` items),
reduced as the agent's kept state would have been. The cut moves only when the trigger fires,
then down to the target, and not again until the trigger: the seed's trigger above its target
is hysteresis. The history itself is never changed: the caller keeps every message.

It is stateless: the same messages and policy give the same input, whatever calls came before,
in any process. A bounded memo (keyed by content: the messages it was computed from, compared
as exact copies) makes a call that extends an earlier one replay only the calls since, never
anything different. The replay runs the policy only at calls whose input is above the trigger
(a trigger in chars is checked from the messages' measured chars; a token trigger runs the
policy at every call). A handler that cannot be replayed (``summarize``) keeps its output in a
store (:mod:`contextpolicy.stores`).

The plan of every call is the agents' plan (:func:`~contextpolicy.adapters._agent.agent_plan`):
instructions and ``lead`` messages given apart, the leading system messages, ``history``, the
``question`` (the last message that opens a turn) and the ``turn`` after it.
"""

from __future__ import annotations

import threading
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from . import _kernel, _tracing
from ._snapshots import same, snapshot
from ._tables import FLAG_GLUES_NEXT, FLAG_TOOL_CALLS, ROLE_ASSISTANT, ROLE_OTHER
from ._trim_replay import TrimRuns
from .accounting import TokenCounter
from .adapters._agent import agent_plan, prepare_agent_policy, under
from .adapters._returned import origins, trimmed_away
from .content import plain_copy
from .core import aprocess_context, process_context
from .counters._usage import UsageAnchoredCounter
from .errors import ContextPlanError, ContextPolicyError
from .policy import ReducePolicy
from .prepared import PreparedPolicy
from .report import ContextResult, ReportModel
from .stores import TALLY, MemoryStore, SummaryStore, Tally, stored_handlers

__all__ = ["CUTS", "CutReport", "StableCut", "StableResult", "call_starts", "checked_cut"]

# The cuts an adapter's ephemeral mode offers: this module's (the default) and the plain one,
# the policy run on each call's whole history.
CUTS = ("stable", "plain")

MEMO_SIZE = 256
# Memo entries compared per call, newest first, before the call replays from the start.
_LOOKUPS = 8
# An entry extends the one its call started from (a snapshot of the messages since); past this
# many links, a new entry holds the whole prefix (the older snapshots, shared, and the new part).
_CHAIN = 16
_MODEL_OUTPUT = FLAG_TOOL_CALLS | FLAG_GLUES_NEXT


class CutReport(ReportModel):
    """What a stable cut did for one call.

    ``calls``: the model calls the history holds (the earlier ones and this one);
    ``replayed``: the earlier calls replayed for this one (none when the memo held them);
    ``runs``: the policy runs the replay made (one per earlier call whose input was above the
    trigger); ``cutThisCall``: the policy's trigger fired on this call; ``heldMessages`` and
    ``heldChars``: the messages an earlier call's cut removed or changed, and the chars it
    saves, that this call's input still goes without; ``lastCut``: the number of the call
    (from 0) whose reduction changed the kept state last (``None``: none has);
    ``storeHits`` and ``handlerCalls``: outputs of stored handlers taken from the store, and
    their calls made, during this call."""

    kind: Literal["stable"] = "stable"
    calls: int
    replayed: int
    runs: int
    cut_this_call: bool
    held_messages: int
    held_chars: int
    last_cut: int | None
    store_hits: int
    handler_calls: int


class StableResult(ContextResult):
    """A :class:`~contextpolicy.ContextResult` of a stable cut: ``cut`` says what the cut did,
    ``sources`` gives, for each message of ``input``, the index in the given messages of the
    message it is or stands for (``-1``: instructions, the tools, a lead message, or a message
    no given one stands behind, such as a summary). A message of ``input`` that is one of the given
    messages is that very object."""

    __slots__ = ("cut", "sources")
    cut: CutReport
    sources: list[int]


@dataclass
class _State:
    """The kept state after a call: for each kept message the index of the given message it is
    or stands for (``-1``: none), and its own dict when it is not that message as it was."""

    src: list[int] = field(default_factory=list)
    own: list[dict[str, Any] | None] = field(default_factory=list)
    chars: int = 0
    upto: int = 0  # the given messages it covers: messages[:upto]
    last_cut: int | None = None
    exact: bool = True  # every own dict is a snapshot (see _snapshots): it may be memoised

    def copy(self) -> _State:
        return _State(list(self.src), list(self.own), self.chars, self.upto, self.last_cut,
                      self.exact)


@dataclass
class _Entry:
    """The memo's record of one call: the state after it, and what it was computed from."""

    upto: int
    parent: _Entry | None
    chunk: list[Any]  # a snapshot of messages[parent.upto:upto]
    lead: list[Any]
    texts: tuple[str | None, str | None]  # the instructions and the tools given apart
    question: bool
    state: _State
    key: int  # its _fingerprint


def checked_cut(cut: Any) -> str:
    """``cut`` when it is one of :data:`CUTS`; a :class:`ContextPolicyError` otherwise."""
    if cut not in CUTS:
        raise ContextPolicyError(f"expected 'stable' or 'plain', got {cut!r}", path="cut",
                                 code="invalid-option")
    return str(cut)


def call_starts(roles: np.ndarray, flags: np.ndarray) -> np.ndarray:
    """The indices at which a model call's output starts: the first of each run of assistant
    messages and Responses ``function_call``/``reasoning`` items (index 0 excluded: no call
    is made with nothing)."""
    out = (roles == ROLE_ASSISTANT) | ((roles == ROLE_OTHER) & ((flags & _MODEL_OUTPUT) != 0))
    if not len(out):
        return np.zeros(0, dtype=np.intp)
    starts = np.flatnonzero(out & ~np.concatenate(([False], out[:-1])))
    return starts[starts > 0]




class StableCut:
    """A policy applied as a cache-stable cut (see the module docstring).

    ``policy``: a document, a typed policy or a :class:`~contextpolicy.PreparedPolicy`,
    checked as the adapters check it (steps may name ``history`` and ``turn``); ``store``:
    where handlers that cannot be replayed keep their outputs (a
    :class:`~contextpolicy.stores.MemoryStore` by default); ``memo_size``: how many calls'
    states the memo holds (0: none, and every call replays from the start, with the same
    result). One instance serves many conversations, threads and tasks at once.
    """

    def __init__(
        self,
        policy: Any,
        *,
        handlers: Mapping[str, Callable[..., Any]] | None = None,
        counter: Any = None,
        store: SummaryStore | None = None,
        memo_size: int = MEMO_SIZE,
    ) -> None:
        if type(memo_size) is not int or memo_size < 0:
            raise ValueError(f"memo_size: expected an integer >= 0, got {memo_size!r}")
        if store is not None and not isinstance(store, SummaryStore):
            raise TypeError(f"store: expected an object with get(key) and put(key, value) "
                            f"(a SummaryStore), got {type(store).__name__}")
        self.prepared = prepare_agent_policy(policy, handlers, counter)
        self.store: SummaryStore = store if store is not None else MemoryStore()
        p = self.prepared
        self.replaying = PreparedPolicy.of_valid(
            p.policy, stored_handlers(p.handlers, self.store), as_of_each_call(p.counter))
        typed = p.policy
        reduce = typed if isinstance(typed, ReducePolicy) else None
        self.cuts = reduce is not None and (
            reduce.trigger_chars is not None or reduce.trigger_tokens is not None)
        # A trigger in chars alone is checked from the measured chars; a token one needs a run.
        self.trigger = reduce.trigger_chars if (
            reduce is not None and reduce.trigger_tokens is None) else None
        # A policy that only trims the history replays earlier calls without a plan each.
        self.trims_only = TrimRuns.applies(self.replaying)
        self.memo_size = memo_size
        self._memo: OrderedDict[int, _Entry] = OrderedDict()  # by _fingerprint
        self._lock = threading.Lock()

    @property
    def policy(self) -> Any:
        """The typed policy."""
        return self.prepared.policy

    def process(
        self,
        messages: list[Any],
        *,
        lead: Sequence[dict[str, Any]] = (),
        instructions: str | None = None,
        question: bool = True,
        on_event: Callable[[Any], None] | None = None,
        cancel: Any = None,
        path: str = "messages",
        tools: str | None = None,
    ) -> StableResult:
        """The input of the call whose history is ``messages`` (a list of message dicts, never
        changed), after ``lead`` (messages given apart, such as a system prompt) and
        ``instructions``, and ``tools`` (the tool schemas the model is given, as one text:
        ``agent_plan``'s protected ``tools`` fragment). ``question=False``: no message is the
        question, in this call or an earlier one (a stored history; see ``agent_plan``).
        ``on_event`` and ``cancel`` apply to this call's own run; ``path`` names the messages in
        errors (``messages[3]``).

        Raises what :func:`~contextpolicy.process_context` raises, a message the kernel cannot
        read being a :class:`~contextpolicy.ContextPlanError` naming its index."""
        spans = _tracing.active()
        if spans is not None:  # telemetry.instrument(): one span, the replay's runs in it
            return spans.call(self.process, self.policy, messages, lead=lead,  # type: ignore
                              instructions=instructions, question=question,
                              on_event=on_event, cancel=cancel, path=path, tools=tools)
        replay = _Replay(self, messages, lead, instructions, tools, question, path)
        for plan in replay.plans():
            options = _options(on_event, cancel) if replay.final else {}
            replay.result = process_context(plan, self.replaying, **options)
        return replay.finished()

    async def aprocess(
        self,
        messages: list[Any],
        *,
        lead: Sequence[dict[str, Any]] = (),
        instructions: str | None = None,
        question: bool = True,
        on_event: Callable[[Any], None] | None = None,
        cancel: Any = None,
        path: str = "messages",
        tools: str | None = None,
    ) -> StableResult:
        """:meth:`process` for async code: handlers may be coroutine functions."""
        spans = _tracing.active()
        if spans is not None:  # telemetry.instrument(): one span, the replay's runs in it
            return await spans.acall(  # type: ignore[no-any-return]
                self.aprocess, self.policy, messages, lead=lead, instructions=instructions,
                question=question, on_event=on_event, cancel=cancel, path=path, tools=tools)
        replay = _Replay(self, messages, lead, instructions, tools, question, path)
        for plan in replay.plans():
            options = _options(on_event, cancel) if replay.final else {}
            replay.result = await aprocess_context(plan, self.replaying, **options)
        return replay.finished()

    def lookup(self, items: list[Any], lead: list[Any], texts: tuple[str | None, str | None],
               question: bool, starts: np.ndarray, measured: tuple[np.ndarray, ...],
               ) -> _Entry | None:
        """The memo's entry for the latest earlier call of ``items`` it holds (among the newest
        few): one computed from the same messages (compared as exact copies, and measured
        alike), under the same lead, instructions, tools and question. Only an earlier call's state
        is taken: the state after a call whose messages are not followed by a model output
        (a retried call, a stored history read again) is never one the replay passes."""
        if not self.memo_size:
            return None
        for p in starts[::-1][:_LOOKUPS]:
            with self._lock:
                entry = self._memo.get(_fingerprint(int(p), measured))
            if entry is None:
                continue
            if (all(type(a) is type(b) for a, b in zip(texts, entry.texts, strict=True))
                    and entry.texts == texts and entry.question is question
                    and same(entry.lead, lead) and _holds(entry, items)):
                with self._lock:
                    if entry.key in self._memo:
                        self._memo.move_to_end(entry.key)
                return entry
        return None

    def remember(self, items: list[Any], lead: list[Any], texts: tuple[str | None, str | None],
                 question: bool, state: _State, parent: _Entry | None,
                 measured: tuple[np.ndarray, ...]) -> None:
        """Keep ``state`` (after the call whose history is ``items[:state.upto]``)."""
        if not self.memo_size or not state.exact:
            return
        start = parent.upto if parent is not None else 0
        chunk = snapshot(items[start:state.upto])
        lead_copy = snapshot(lead)
        if chunk is None or lead_copy is None or (
                any(t is not None and type(t) is not str for t in texts)):
            return
        chain = _chain(parent)
        if len(chain) >= _CHAIN:  # one chunk for the whole prefix: a lookup walks one link
            chunk = [m for e in chain for m in e.chunk] + chunk
            parent = None
        key = _fingerprint(state.upto, measured)
        entry = _Entry(state.upto, parent, chunk, lead_copy, texts, question,
                       state.copy(), key)
        with self._lock:
            self._memo[key] = entry
            self._memo.move_to_end(key)
            while len(self._memo) > self.memo_size:
                self._memo.popitem(last=False)


class _Replay:
    """One call's replay: :meth:`plans` yields each plan to run (the earlier calls whose input
    is above the trigger, then this call's), each answered by setting :attr:`result`."""

    def __init__(self, cut: StableCut, messages: list[Any], lead: Sequence[dict[str, Any]],
                 instructions: str | None, tools: str | None, question: bool,
                 path: str) -> None:
        if not isinstance(messages, list):
            raise ContextPlanError(
                f"expected a list of messages, got {type(messages).__name__}",
                path=path, code="invalid-messages")
        self.cut = cut
        self.items: list[Any] = list.__getitem__(messages, slice(None))
        if lead is None:
            lead = ()
        if not isinstance(lead, (list, tuple)):
            raise ContextPlanError(f"expected a list of messages, got {type(lead).__name__}",
                                   path="lead", code="invalid-messages")
        self.lead = list(lead)
        texts = (instructions, tools)
        if self.lead or any(t is not None and type(t) is not str for t in texts):
            # what agent_plan checks of them, said before any work (errors naming the field)
            agent_plan([], lead=self.lead, instructions=instructions, tools=tools)
        self.instructions, self.tools, self.texts = instructions, tools, texts
        self.question = question = bool(question)
        self.path = path
        try:
            whole = _kernel.measure(self.items)
        except ContextPlanError as exc:
            raise under(exc, path) from None
        roles, chars, flags, _ = whole.arrays()
        self.fixed = int(_kernel.measure_messages(self.lead)[1].sum()) if self.lead else 0
        # as the plan counts them: a str subclass's own __len__ is not its length
        self.fixed += sum(str.__len__(t) for t in texts if t is not None)
        self.skip = len(self.lead) + sum(t is not None for t in texts)
        self.starts = call_starts(roles, flags)
        self.measured = (roles, chars, flags)
        self.item_chars: list[int] = chars.tolist()
        self.cum = np.concatenate(([0], np.cumsum(chars, dtype=np.int64)))
        self.whole = whole
        self.trims: TrimRuns | None = None  # made at the first run, for a trims-only policy
        self.entry = cut.lookup(self.items, self.lead, texts, question, self.starts,
                                self.measured) if cut.cuts else None
        self.state = _State() if self.entry is None else self.entry.state.copy()
        self.final = False
        self.result: ContextResult | None = None
        self.tally = Tally()
        self.runs = 0
        self.sources: list[int] = []
        self.held = (0, 0)

    def plans(self) -> Generator[Any, None, None]:
        token = TALLY.set(self.tally)
        try:
            for call, p in self._due():
                self.runs += 1
                if not self.cut.trims_only or not self._trimmed(p, call):
                    yield self._plan(p)
                    self._advance(p, call)
            state, n = self.state, len(self.items)
            kept = sum(1 for s, d in zip(state.src, state.own, strict=True)
                       if d is None and s >= 0)
            self.held = (state.upto - kept, int(self.cum[state.upto]) - state.chars)
            self.final = True
            yield self._plan(n)
            self.sources = [-1] * self.skip + self._advance(n, len(self.starts))
        finally:
            TALLY.reset(token)

    def finished(self) -> StableResult:
        cut, result = self.cut, self.result
        assert result is not None
        if cut.cuts:
            cut.remember(self.items, self.lead, self.texts, self.question, self.state,
                         self.entry, self.measured)
        done = self.entry.upto if self.entry is not None else 0
        report = CutReport(
            calls=len(self.starts) + 1,
            replayed=len(self.starts) - int(np.searchsorted(self.starts, done, side="right")),
            runs=self.runs, cut_this_call=bool(result.report.triggered),
            held_messages=self.held[0], held_chars=max(0, self.held[1]),
            last_cut=self.state.last_cut, store_hits=self.tally.hits,
            handler_calls=self.tally.calls)
        out = object.__new__(StableResult)
        for name in ("_input", "_make", "_plan", "_records", "_report"):
            setattr(out, name, getattr(result, name))
        out.cut, out.sources = report, self.sources
        return out

    def _due(self) -> Generator[tuple[int, int], None, None]:
        """The earlier calls after ``state.upto`` at which the policy runs (each as its number
        and the index its output starts at): each whose input is above a chars trigger, or
        every one with a token trigger."""
        cut, cum = self.cut, self.cum
        if not cut.cuts:
            return
        # The calls after the state, as lists bisected at each run: starts[j] is call done + j
        done = int(np.searchsorted(self.starts, self.state.upto, side="right"))
        if done == len(self.starts):
            return
        starts: list[int] = self.starts[done:].tolist()
        at: list[int] = cum[self.starts[done:]].tolist()
        i = 0
        while i < len(starts):
            if cut.trigger is None:
                k = i
            else:  # the first p with fixed + state + (cum[p] - cum[upto]) > trigger
                need = cut.trigger - self.fixed - self.state.chars + int(cum[self.state.upto])
                k = max(i, bisect_right(at, need))
                if k >= len(starts):
                    return
            yield done + k, starts[k]
            i = k + 1

    def _trimmed(self, p: int, call: int) -> bool:
        """The run at ``p`` made without a plan (``_trim_replay``), when the state allows."""
        state, trims = self.state, self.trims
        if state.own.count(None) != len(state.own):  # a handler's message: not a trim's
            return False
        if trims is None:
            trims = self.trims = TrimRuns(self.cut.replaying, self.whole, self.items,
                                          self.measured[2], self.cum.tolist(), self.fixed,
                                          self.question)
        out = trims.run(state.src, state.chars, state.upto, p)
        if out is None:
            return False
        src, chars, cut = out
        self.state = _State(src, [None] * len(src), chars, p,
                            call if cut else state.last_cut, state.exact)
        return True

    def _plan(self, p: int) -> Any:
        """The plan of the call before ``items[p]``: the kept state, then what came since."""
        state, items = self.state, self.items
        # This call's result is the caller's: it gets copies of the state's own dicts.
        given = [items[s] if d is None else (plain_copy(d) if self.final else d)
                 for s, d in zip(state.src, state.own, strict=True)]
        given += items[state.upto:p]
        self.given = given
        self.plan = agent_plan(given, lead=self.lead, instructions=self.instructions,
                               tools=self.tools, question=self.question, path=self.path)
        return self.plan

    def _advance(self, p: int, call: int) -> list[int]:
        """The state after the run at ``p`` (call number ``call``); the source of each
        message it keeps."""
        result, state, given = self.result, self.state, self.given
        assert result is not None
        kept = result.input[self.skip:]
        src_of = [*state.src, *range(state.upto, p)]
        own_of = [*state.own, *([None] * (p - state.upto))]
        # Each kept message that is a given one, by identity (C loops: this runs per call).
        at = dict(zip(map(id, given), range(len(given)), strict=True))
        found: list[int | None] = list(map(at.get, map(id, kept)))
        if None in found:
            src, own, exact = self._traced(kept, found, src_of, own_of)
            changed = src != src_of or any(a is not b for a, b in zip(own, own_of, strict=False))
        else:
            hits: list[int] = found  # type: ignore[assignment]
            src = list(map(src_of.__getitem__, hits))
            own = list(map(own_of.__getitem__, hits))
            exact = state.exact
            changed = hits != list(range(len(given)))
        chars = self.item_chars
        owned = [d for d in own if d is not None]
        if owned:
            count = sum(chars[s] for s, d in zip(src, own, strict=True) if d is None)
            count += int(_kernel.measure_messages(owned)[1].sum())
        else:
            count = sum(map(chars.__getitem__, src))
        self.state = _State(src, own, count, p, call if changed else state.last_cut, exact)
        return src

    def _traced(self, kept: list[Any], found: list[int | None], src_of: list[int],
                own_of: list[dict[str, Any] | None],
                ) -> tuple[list[int], list[dict[str, Any] | None], bool]:
        """The sources and own dicts of ``kept`` where a handler's dicts are among them: each
        traced to the given message it stands for (``_returned.origins``)."""
        result, given = self.result, self.given
        assert result is not None
        fragments = [(f.id, f.messages) for f in self.plan.fragments if f.messages is not None]
        traced = origins(given, kept, lambda: trimmed_away(
            fragments, result.report.steps, given))
        src: list[int] = []
        own: list[dict[str, Any] | None] = []
        exact = self.state.exact
        for j, (d, hit) in enumerate(zip(kept, found, strict=True)):
            if hit is not None:
                src.append(src_of[hit])
                own.append(own_of[hit])
                continue
            origin = traced[j]
            src.append(src_of[origin.source] if origin is not None else -1)
            if origin is not None and origin.unchanged:  # the handler's copy of it, as it was
                own.append(own_of[origin.source])
                continue
            copy = snapshot(d)
            exact = exact and copy is not None
            own.append(copy if copy is not None else d)
        return src, own, exact


def as_of_each_call(counter: TokenCounter | None) -> TokenCounter | None:
    """The counter each call of a replay counts with: a usage-anchored counter as that call saw
    it (reports of shorter inputs only; a report of the input itself came after its call), so a
    replayed call decides as it did, memo or not; any other counter as it is."""
    source = getattr(counter, "source", None)
    if isinstance(source, UsageAnchoredCounter):
        return TokenCounter(source.as_of_each_call())
    return counter


def _options(on_event: Any, cancel: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if on_event is not None:
        out["on_event"] = on_event
    if cancel is not None:
        out["cancel"] = cancel
    return out


def _fingerprint(upto: int, measured: tuple[np.ndarray, ...]) -> int:
    """A key for the messages before ``upto`` by what the kernel measured of each (its role,
    chars and flags): the memo's candidates for a prefix, which a full comparison confirms."""
    return hash((upto, *(a[:upto].tobytes() for a in measured)))


def _chain(entry: _Entry | None) -> list[_Entry]:
    """``entry`` and the entries it extends, the oldest first."""
    out = []
    while entry is not None:
        out.append(entry)
        entry = entry.parent
    return out[::-1]


def _holds(entry: _Entry, items: list[Any]) -> bool:
    """``items`` starts with the messages ``entry`` was computed from."""
    e: _Entry | None = entry
    while e is not None:
        start = e.parent.upto if e.parent is not None else 0
        if not same(e.chunk, items[start:e.upto]):
            return False
        e = e.parent
    return True
