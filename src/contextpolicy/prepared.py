"""A prepared policy: a policy, its handlers and its counter checked once, for many calls.

``process_context`` does only per-plan work with one: the policy's references are checked
against the plan's fragment ids and kinds in O(fragments), and nothing is validated again. A
typed policy (what :func:`validate_context_policy` returns) and a policy document are prepared
on first use and kept (a bounded cache: a document by its exact JSON bytes, a typed policy by
identity), so they are fast too; the figures of all three are the same.
"""

from __future__ import annotations

import inspect
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import orjson

from ._tables import GROUPING_CODES
from .accounting import TokenCounter, as_counter
from .errors import ContextPlanError, ContextPolicyError, Issue
from .implementations import DEFAULT_IMPLEMENTATIONS
from .plan import ContextPlan
from .policy import AuditPolicy, ReducePolicy, TypedPolicy
from .policy.models import TrimStep, ValidatePolicy
from .policy.rules import FragmentRef, Reference, fragment_refs, reference_issues
from .policy.validation import dedupe, policy_issues, references, uses_tokens

__all__ = [
    "FastPath", "PreparedPolicy", "carried_options", "check_arguments", "checked_policy",
    "is_async_callable", "prepare_policy", "prepared_for_call",
]

TYPED = (ValidatePolicy, ReducePolicy, AuditPolicy)


class FastPath(NamedTuple):
    """How the kernel runs a prepared policy in one call (``_kernel.reduce_plan``,
    ``reduce_transcript``, ``reduce_lines``, ``reduce_rows``): a validate, or a reduce whose
    steps are all trims by chars, with no token counter."""

    # (fragment id, grouping code, keep_groups, target_chars) of each trim; () for a validate
    steps: tuple[tuple[str, int, int, int], ...]
    trigger_chars: int  # -1: none
    watermark_chars: int  # -1: none
    # The policy names no fragment but the history, which a transcript split into system,
    # history and question always may change: a transcript runs in one call.
    history_only: bool


class PreparedPolicy:
    """A policy with its handlers and counter, checked once: pass it to ``process_context``
    (and the async entry points) in place of the policy, without ``handlers`` or ``counter``.

    ``policy`` is the typed policy, ``handlers`` the registered handlers, ``counter`` the
    :class:`TokenCounter` (or ``None``), ``mode`` the policy's mode, ``fast_path`` how the
    kernel runs it in one call (a :class:`FastPath`), or ``None`` when it cannot.
    """

    __slots__ = ("_async", "_fixed", "_handler_names", "_items", "_refs", "_token_key",
                 "counter", "fast_path", "handlers", "mode", "policy")
    _async: bool
    _fixed: TypedPolicy | None
    _refs: tuple[Reference, ...]
    _handler_names: tuple[str, ...]
    _items: tuple[Any, ...]
    _token_key: str | None
    counter: TokenCounter | None
    # How the kernel runs this policy in one call, when it can (see FastPath); None otherwise.
    fast_path: FastPath | None
    handlers: dict[str, Callable[..., Any]]
    mode: str
    policy: TypedPolicy

    def __init__(self) -> None:
        raise TypeError("use prepare_policy(policy, handlers=..., counter=...)")

    @classmethod
    def of_valid(cls, typed: TypedPolicy, handlers: dict[str, Callable[..., Any]],
                 counter: TokenCounter | None) -> PreparedPolicy:
        """A prepared policy of a typed policy, which is valid by construction; its handlers
        and counter as given (``prepare_policy`` checks them against the policy: this does not,
        for a caller that reports a missing handler per plan)."""
        self = object.__new__(cls)
        self.policy, self.handlers, self.counter, self.mode = typed, handlers, counter, typed.mode
        refs = references(typed)
        self._refs = tuple(r for r in refs if r.what != "handler")  # checked against each plan
        self._handler_names = tuple(r.name for r in refs if r.what == "handler")
        self._token_key = uses_tokens(typed)
        # Handlers a sync call cannot run.
        self._async = any(
            r.what == "handler" and is_async_callable(handlers.get(r.name)) for r in refs
        )
        self._items = _items(typed)
        # A validate policy holds no list that could change in place: while ``policy`` is
        # still it, this is current (``policy is _fixed``, one comparison per call).
        self._fixed = typed if type(typed) is ValidatePolicy else None
        self.fast_path = _fast_path(typed, counter, self._refs)
        return self

    def __repr__(self) -> str:
        return (f"PreparedPolicy(mode={self.mode!r}, handlers={sorted(self.handlers)}, "
                f"counter={'yes' if self.counter is not None else 'none'})")

    def fits(self, plan: ContextPlan, is_async: bool) -> bool:
        """The policy applies to ``plan`` as it is: its references keep the reference rules
        against the plan's fragments, this call can run its handlers, an audit has an
        original. ``False``: the full check says what is wrong."""
        if self._async and not is_async:
            return False
        audit = type(self.policy) is AuditPolicy
        if audit and plan.original is None:
            return False
        return not self._refs or not reference_issues(self._refs, plan_refs(plan, audit), None)

    def current(self, typed: TypedPolicy | None = None) -> bool:
        """``typed`` (by default this policy's own) still holds what this was prepared from (its
        lists are the caller's, and could have changed in place)."""
        if typed is None:
            typed = self.policy
        return typed is self._fixed or _items(typed) == self._items

    @property
    def transcript_path(self) -> FastPath | None:
        """:attr:`fast_path` when a transcript (system, history, question) runs in one kernel
        call: the policy names no fragment but the history. ``None`` otherwise."""
        fast = self.fast_path
        return fast if fast is not None and fast.history_only else None


def plan_refs(plan: ContextPlan, audit: bool) -> dict[str, FragmentRef]:
    """The plan's fragments as the reference rules see them. An audit names fragments of the
    original too (a removed one, say), and judges protection as it was originally."""
    refs = fragment_refs(plan.fragments)
    if audit:
        refs.update(fragment_refs(plan.original or ()))
    return refs


def carried_options(handlers: Any, counter: Any) -> Issue | None:
    """The issue of handlers or a counter given beside a prepared policy, which carries its
    own (``None`` when neither is given)."""
    if handlers is None and counter is None:
        return None
    return Issue("handlers" if handlers is not None else "counter",
                 "a prepared policy carries its handlers and counter; pass them to "
                 "prepare_policy(...)", "invalid-option")


def tokens_without_counter(key: str) -> Issue:
    """The issue of a token watermark (at ``key``) without a counter."""
    return Issue(key, "token watermarks need a token counter (pass counter=...); tokens are "
                 "never guessed from characters", "tokens-without-counter")


def _fast_path(typed: TypedPolicy, counter: TokenCounter | None,
               refs: tuple[Reference, ...]) -> FastPath | None:
    """How the kernel runs ``typed`` in one call: a validate, or a reduce whose steps are all
    trims, by chars, without a counter. ``None`` otherwise."""
    if counter is not None:
        return None
    history_only = all(ref.name == "history" for ref in refs)
    if type(typed) is ValidatePolicy:
        return FastPath((), -1, -1, history_only)
    if type(typed) is not ReducePolicy or typed.uses_tokens or not all(
        type(step) is TrimStep for step in typed.steps
    ):
        return None
    steps = tuple((step.fragment_id, GROUPING_CODES[step.grouping.kind], step.keep_groups,
                   step.target_chars) for step in typed.steps if isinstance(step, TrimStep))
    trigger, watermark = typed.trigger_chars, typed.watermark_chars
    return FastPath(steps, -1 if trigger is None else trigger,
                    -1 if watermark is None else watermark, history_only)


def _items(typed: TypedPolicy) -> tuple[Any, ...]:
    # What a typed policy's lists hold (the steps, or the mutable ids): equal items, the same
    # policy. A tuple of the list compares element by element, identity first: cheap per call.
    kind = type(typed)
    if kind is ReducePolicy:
        return tuple(typed.steps)  # type: ignore[union-attr]
    if kind is AuditPolicy:
        return tuple(typed.mutable_fragment_ids)  # type: ignore[union-attr]
    return ()


def is_async_callable(fn: Any) -> bool:
    """``fn`` is a coroutine function (or an object whose ``__call__`` is one)."""
    return fn is not None and (inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004
    ))


def check_arguments(
    handlers: Any, cancel: Any, on_step_error: Any, implementations: Any, on_event: Any = None,
) -> None:
    """Every bad argument of a ``process_context`` call at once, each with its name as path."""
    issues: list[Issue] = []
    if on_step_error not in ("continue", "raise"):
        issues.append(Issue("on_step_error", f"expected 'continue' or 'raise', got "
                            f"{on_step_error!r}", "invalid-option"))
    if cancel is not None and not callable(getattr(cancel, "is_set", None)):
        issues.append(Issue("cancel", "expected an object with is_set() (threading.Event), got "
                            f"{type(cancel).__name__}", "invalid-option"))
    if on_event is not None and not callable(on_event):
        issues.append(Issue("on_event", "expected a callable that takes a ContextEvent, got "
                            f"{type(on_event).__name__}", "invalid-option"))
    for name, value, what in (
        ("handlers", handlers, "handler id"), ("implementations", implementations, "mode"),
    ):
        if value is None:
            continue
        if not isinstance(value, Mapping):
            issues.append(Issue(name, f"expected a mapping of {what} to callable, got "
                                f"{type(value).__name__}", f"invalid-{name}-argument"))
            continue
        for key, fn in value.items():
            if not isinstance(key, str):
                issues.append(Issue(name, f"expected {what}s as strings, got "
                                    f"{type(key).__name__} {key!r}", f"invalid-{name}-argument"))
            elif name == "implementations" and key not in DEFAULT_IMPLEMENTATIONS:
                issues.append(Issue(f"{name}.{key}", f"unknown mode {key!r}; expected validate, "
                                    "reduce or audit", "invalid-option"))
            elif not callable(fn):
                issues.append(Issue(f"{name}.{key}", f"expected a callable, got "
                                    f"{type(fn).__name__}", "handler-not-callable"
                                    if name == "handlers" else "invalid-option"))
    if issues:
        raise ContextPolicyError(issues)


def prepare_policy(
    policy: Any,
    *,
    handlers: Mapping[str, Callable[..., Any]] | None = None,
    counter: Any = None,
) -> PreparedPolicy:
    """Check a policy (a document, a typed policy or a prepared one), its handlers and its
    counter once, and return a :class:`PreparedPolicy` for many ``process_context`` calls.

    Raises :class:`ContextPolicyError` with every problem at once: the policy's fields and
    rules, handlers that are not callables, ``handlerId`` references to handlers not given,
    token watermarks without a counter. References to fragments are checked against each plan.
    """
    if isinstance(policy, PreparedPolicy):
        policy = policy.policy
    return checked_policy(policy, handlers, counter)


def checked_policy(
    policy: Any, handlers: Any, counter: Any, plan: ContextPlan | None = None,
    is_async: bool = True,
) -> PreparedPolicy:
    """The one full check of a policy, its handlers and its counter, and with a ``plan`` its
    references to the plan's fragments (an audit's to its original too) and, for a sync call
    (``is_async`` false), handlers it cannot run: every problem at once in one
    :class:`ContextPolicyError`, or the prepared policy. Without a plan, the arguments are
    checked too (a ``process_context`` call checks them itself, before)."""
    issues: list[Issue] = []
    if plan is None:
        try:
            check_arguments(handlers, None, "continue", None)
        except ContextPolicyError as exc:
            issues += exc.issues
        try:
            tc = as_counter(counter)
        except ContextPolicyError as exc:
            issues += exc.issues
            tc = None
    else:
        tc = as_counter(counter)
    given = dict(handlers) if isinstance(handlers, Mapping) else {}
    audit = (isinstance(policy, Mapping) and policy.get("mode") == "audit") or isinstance(
        policy, AuditPolicy
    )
    typed, more = policy_issues(policy, plan_refs(plan, audit) if plan is not None else None,
                                given)
    issues += more
    token_key = uses_tokens(typed if typed is not None else policy)
    if token_key is not None and tc is None:
        issues.append(tokens_without_counter(token_key))
    if not is_async:
        for ref in references(typed if typed is not None else policy):
            handler = given.get(ref.name) if ref.what == "handler" else None
            if handler is not None and is_async_callable(handler):
                issues.append(Issue(
                    ref.path, f"handler {ref.name!r} is a coroutine function; use "
                    "aprocess_context or astream_context", "async-handler",
                ))
    if issues:
        raise ContextPolicyError(dedupe(issues))
    assert typed is not None
    if plan is not None and isinstance(typed, AuditPolicy) and plan.original is None:
        raise ContextPlanError(
            "an audit needs the plan's original fragments (ContextPlan(original=...))",
            path="original", code="missing-original",
        )
    return PreparedPolicy.of_valid(typed, given, tc)


# Policies prepared on first use: a document by its exact JSON bytes, a typed policy by identity
# (held here, so its id stays its own). Bounded: the oldest entries go first. Each entry is the
# policy alone (no handlers, no counter); a call's handlers and counter are checked against it.
CACHE_SIZE = 128
_cache: OrderedDict[Any, tuple[Any, PreparedPolicy]] = OrderedDict()


def _document_key(policy: Any) -> bytes | None:
    """A document's exact content as a cache key, or ``None`` when bytes cannot stand for it:
    subclasses (whose methods validation would ask), values JSON cannot hold, and ``null``
    (orjson writes NaN and infinities as null too)."""
    try:
        key = orjson.dumps(policy, option=orjson.OPT_PASSTHROUGH_SUBCLASS)
    except (TypeError, orjson.JSONEncodeError):
        return None
    return None if b"null" in key else key


def _bare(policy: Any) -> PreparedPolicy | None:
    """The policy alone, prepared (cached), or ``None`` when it does not validate."""
    if type(policy) is dict:
        key: Any = _document_key(policy)
        if key is None:
            return None
    elif isinstance(policy, TYPED):
        key = id(policy)
    else:
        return None
    found = _cache.get(key)
    if found is not None and (found[0] is policy or type(key) is bytes):
        if type(key) is bytes or found[1].current(policy):
            return found[1]
    typed, issues = policy_issues(policy, None, None)
    if issues or typed is None:
        return None
    prepared = PreparedPolicy.of_valid(typed, {}, None)
    _cache[key] = (policy if type(key) is not bytes else None, prepared)
    if len(_cache) > CACHE_SIZE:
        _cache.popitem(last=False)
    return prepared


def prepared_for_call(policy: Any, handlers: Any, counter: Any) -> PreparedPolicy | None:
    """The prepared form of a call's policy, handlers and counter when they check out without
    the plan; ``None`` when they do not, and the full check is to say what is wrong (every
    issue at once)."""
    if type(policy) is PreparedPolicy:
        carried = carried_options(handlers, counter)
        if carried is not None:
            raise ContextPolicyError(carried)
        return policy if policy.current(policy.policy) else None
    bare = _bare(policy)
    if bare is None:
        return None
    if handlers is None and counter is None:
        if bare._handler_names or bare._token_key is not None:
            return None
        return bare
    given = dict(handlers or {})
    tc = as_counter(counter)
    if any(name not in given for name in bare._handler_names) or (
        bare._token_key is not None and tc is None
    ):
        return None
    return PreparedPolicy.of_valid(bare.policy, given, tc)
