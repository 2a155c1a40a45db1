"""A context policy inside the OpenAI Agents SDK (extra ``[openai-agents]``).

:func:`context_policy_input_filter` is a ``call_model_input_filter`` for ``agents.RunConfig``:
before every model call the SDK hands it the instructions and the Responses input items, and
the model receives what the policy keeps::

    from agents import Agent, RunConfig, Runner
    from contextpolicy.adapters.openai_agents import context_policy_input_filter

    keep = context_policy_input_filter(policy)
    result = Runner.run_sync(agent, items, run_config=RunConfig(call_model_input_filter=keep))
    keep.last_report  # what the last model call was reduced by, measured

:class:`ContextPolicySession` wraps an SDK ``Session`` and reduces the history it returns; the
stored items are never touched.

The instructions and the input items make the plan every adapter makes (``_agent``), so one
policy file works here and in LangChain:

- ``instructions``: the agent's instructions, a protected text fragment (kind ``system``). It
  counts, and it is never changed: the SDK gets it back as it came.
- ``tools``: the schemas of the agent's tools and handoffs (``agent_tools``), a protected text
  fragment: the model reads them with every call, so they count against the trigger.
- ``system``: leading ``system``/``developer`` message items (protected), when there are any.
- ``history``: every item between those and the question (always present, maybe empty).
- ``question``: the last ``user`` message item that opens a turn (protected); absent when no
  item does.
- ``turn``: every item after the question (always present, maybe empty): between two model
  calls of one turn, that turn's reasoning, tool calls and tool outputs so far. Tool outputs
  are not the user's question and may be large, so they are not protected, but only a step
  that names ``turn`` reduces it.

A session's items are split the same way except that no item is the question: a session
stores the history, and the new question arrives as the run's input. Every item after the
leading system items is ``history``, and ``turn`` is empty (a policy's ``turn`` step finds
nothing to do there).

Items stay the SDK's own objects: dicts are handed to the kernel as they are, and pydantic items
are measured through ``model_dump(exclude_unset=True)`` and mapped back, so the SDK receives the
very objects it sent for every item kept (it tracks items by identity), a compress step's
included: an item its handler left as it was (the same content, as the model sees it) is the
SDK's own object again. An item a handler changed goes to the model as the handler returned it
(a dict holding every other key of the item), and so does one it wrote. Nothing the SDK passes
in is mutated.

With server-managed conversation state (``previous_response_id``, ``conversation_id``, an
``OpenAIConversationsSession``) the SDK sends only the items the server has not seen, and the
history lives on the server: a policy here sees, and may trim, only those new items.

Importing this module does not import ``agents``; building a filter or a session does, and says
which extra to install when it is missing.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..core import aprocess_context, process_context
from ..prepared import is_async_callable
from ..stable import CutReport, StableCut, checked_cut
from ._agent import FRAGMENT_IDS, agent_plan, prepare_agent_policy, tools_text
from ._items import LastResult, as_items, kept_items, traced_items
from ._usage import anchored_counter
from ._usage_feed import CallFeed, run_hooks_class

if TYPE_CHECKING:
    from agents.run_config import CallModelData, ModelInputData

    from ..plan import ContextPlan
    from ..prepared import PreparedPolicy
    from ..report import ContextReport, ContextResult

__all__ = [
    "FRAGMENT_IDS",
    "ContextPolicyInputFilter",
    "ContextPolicySession",
    "context_policy_input_filter",
]

_EXTRA = "pip install 'contextpolicy[openai-agents]'"


def _model_input_data_type() -> type[ModelInputData]:
    try:
        from agents.run_config import ModelInputData
    except ImportError:
        try:  # openai-agents before run_config.py: defined in agents.run
            from agents.run import ModelInputData  # type: ignore[attr-defined,no-redef]
        except ImportError as exc:
            raise ImportError(
                "contextpolicy.adapters.openai_agents needs the OpenAI Agents SDK: " + _EXTRA
            ) from exc
    return ModelInputData


def _plan(instructions: str | None, messages: list[Any], question: bool,
          tools: str | None) -> ContextPlan:
    """The plan of a model call's input (``question``) or of a session's items (no question)."""
    return agent_plan(messages, instructions=instructions, question=question,
                      path="input" if question else "items", tools=tools)


def _tool_schema(tool: Any) -> dict[str, Any]:
    """What the model is told of one of an agent's tools: a function tool's name, description
    and parameters' schema; a hosted tool's name."""
    schema = getattr(tool, "params_json_schema", None)
    if isinstance(schema, Mapping):
        return {"type": "function", "name": getattr(tool, "name", None),
                "description": getattr(tool, "description", None), "parameters": schema}
    return {"type": getattr(tool, "name", type(tool).__name__)}


def agent_tools(agent: Any) -> str | None:
    """The ``tools`` fragment's text for an SDK agent: the schemas of its tools (``agent.tools``,
    in order; a tool whose ``is_enabled`` is ``False`` is not sent, and one whose ``is_enabled``
    is a function of the run is counted) and of its handoffs, which the model is offered as
    ``transfer_to_...`` tools. Tools of MCP servers, listed only during a run, are not
    counted."""
    schemas = [_tool_schema(t) for t in (getattr(agent, "tools", None) or ())
               if getattr(t, "is_enabled", True) is not False]
    handoffs = getattr(agent, "handoffs", None) or ()
    if handoffs:
        from agents import Handoff, handoff

        for item in handoffs:
            h = item if isinstance(item, Handoff) else handoff(item)
            if getattr(h, "is_enabled", True) is False:
                continue
            schemas.append({"type": "function", "name": h.tool_name,
                            "description": h.tool_description,
                            "parameters": h.input_json_schema or {}})
    return tools_text(schemas)


class _Reducer(LastResult):
    """A prepared policy and the last result it gave: the part the filter and the session
    share."""

    def __init__(self, policy: Any, counter: Any,
                 handlers: Mapping[str, Callable[..., Any]] | None, cut: str,
                 store: Any) -> None:
        checked_cut(cut)
        self.model_input_data = _model_input_data_type()
        self.prepared = prepare_agent_policy(policy, handlers, counter)
        self.is_async = any(is_async_callable(h) for h in self.prepared.handlers.values())
        self.stable = StableCut(self.prepared, store=store) if cut == "stable" else None
        self.last_result: ContextResult | None = None
        self.feed: CallFeed | None = None  # a usage-anchored counter's feed, when there is one

    def _sent(self, items: list[Any], result: ContextResult) -> list[Any]:
        # Paired with this call's own result: another thread may have set last_result since.
        if self.feed is not None:
            self.feed.given(items, result)
        return items

    def reduce(self, instructions: str | None, items: Sequence[Any], *,
               question: bool, tools: str | None = None) -> list[Any]:
        messages, back = as_items(items)
        skip = (instructions is not None) + (tools is not None)
        if self.stable is not None:
            stable = self.stable.process(messages, instructions=instructions, question=question,
                                         path="input" if question else "items", tools=tools)
            self.last_result = stable
            return self._sent(traced_items(stable, skip, messages, back), stable)
        result = process_context(_plan(instructions, messages, question, tools), self.prepared)
        self.last_result = result
        return self._sent(kept_items(result, skip, messages, back), result)

    async def areduce(self, instructions: str | None, items: Sequence[Any], *,
                      question: bool, tools: str | None = None) -> list[Any]:
        messages, back = as_items(items)
        skip = (instructions is not None) + (tools is not None)
        if self.stable is not None:
            stable = await self.stable.aprocess(messages, instructions=instructions,
                                                question=question,
                                                path="input" if question else "items",
                                                tools=tools)
            self.last_result = stable
            return self._sent(traced_items(stable, skip, messages, back), stable)
        result = await aprocess_context(_plan(instructions, messages, question, tools),
                                        self.prepared)
        self.last_result = result
        return self._sent(kept_items(result, skip, messages, back), result)


class _Reports:
    """The policy and the last result of a :class:`_Reducer`, as the filter and the session
    both show them."""

    _reducer: _Reducer

    @property
    def policy(self) -> PreparedPolicy:
        """The policy as checked once, with its handlers and counter."""
        return self._reducer.prepared

    @property
    def last_result(self) -> ContextResult | None:
        return self._reducer.last_result

    @property
    def last_report(self) -> ContextReport | None:
        return self._reducer.last_report

    @property
    def last_cut(self) -> CutReport | None:
        """What the stable cut did in the latest call (``None`` before it, or with
        ``cut="plain"``)."""
        return self._reducer.last_cut


class ContextPolicyInputFilter(_Reports):
    """A ``call_model_input_filter`` that runs a context policy before every model call.

    Called with the SDK's ``CallModelData``, it returns a new ``ModelInputData``: the input
    items the policy keeps (the SDK's own objects, in their order) and the instructions
    unchanged. It returns the ``ModelInputData`` itself, or, when any handler is a coroutine
    function (``is_async``), an awaitable of it; the SDK awaits either.

    ``last_report`` is the :class:`~contextpolicy.ContextReport` of the latest call (``None``
    before the first), ``last_result`` its whole :class:`~contextpolicy.ContextResult`,
    ``last_cut`` what the stable cut did (:class:`~contextpolicy.stable.CutReport`). One
    filter shared by concurrent runs holds whichever call finished last.

    With ``counter=usage_anchored(...)`` (:func:`~contextpolicy.counters.usage_anchored`),
    run with ``Runner.run(..., hooks=keep.hooks)``: the SDK hands a filter no usage, and its
    ``RunHooks`` get each model call's input and response, whose ``usage.input_tokens`` is
    recorded for the call's input (``result.input``) when the call was sent exactly the items
    this filter returned.
    """

    def __init__(self, policy: Any, *, counter: Any = None,
                 handlers: Mapping[str, Callable[..., Any]] | None = None,
                 cut: str = "stable", store: Any = None) -> None:
        self._reducer = _Reducer(policy, counter, handlers, cut, store)
        usage = anchored_counter(self._reducer.prepared)
        self._feed = CallFeed(usage) if usage is not None else None
        self._reducer.feed = self._feed
        self._hooks: Any = None

    @property
    def hooks(self) -> Any:
        """An SDK ``RunHooks`` (``Runner.run(..., hooks=keep.hooks)``) whose ``on_llm_start``
        and ``on_llm_end`` feed each model call's reported input tokens to a usage-anchored
        counter; without one it does nothing. A ``RunHooks`` of your own can call these two
        from its own."""
        if self._hooks is None:
            self._hooks = run_hooks_class()(self._feed)
        return self._hooks

    @property
    def is_async(self) -> bool:
        """Whether a call returns an awaitable (some handler is a coroutine function)."""
        return self._reducer.is_async

    def __call__(
        self, data: CallModelData[Any]
    ) -> ModelInputData | Awaitable[ModelInputData]:
        model_data = data.model_data
        tools = agent_tools(getattr(data, "agent", None))
        if self._reducer.is_async:
            return self._afilter(model_data, tools)
        kept = self._reducer.reduce(model_data.instructions, model_data.input, question=True,
                                    tools=tools)
        return self._reducer.model_input_data(input=kept, instructions=model_data.instructions)

    async def _afilter(self, model_data: ModelInputData, tools: str | None) -> ModelInputData:
        kept = await self._reducer.areduce(model_data.instructions, model_data.input,
                                           question=True, tools=tools)
        return self._reducer.model_input_data(input=kept, instructions=model_data.instructions)

    def __repr__(self) -> str:
        return f"ContextPolicyInputFilter({self.policy!r})"


def context_policy_input_filter(
    policy: Any, *, counter: Any = None,
    handlers: Mapping[str, Callable[..., Any]] | None = None,
    cut: str = "stable", store: Any = None,
) -> ContextPolicyInputFilter:
    """A ``call_model_input_filter`` for ``agents.RunConfig`` that runs ``policy`` (a policy
    document, a typed policy or a prepared one) before every model call.

    The policy, handlers and counter are checked once, here (:class:`ContextPolicyError` with
    every problem): a policy of mode ``validate`` or ``reduce`` whose steps name ``history``
    or ``turn``; a prepared policy carries its handlers and counter, so neither is passed
    beside it.

    ``cut="stable"`` (the default) gives each model call what a persisted reduction would hold
    (:class:`~contextpolicy.stable.StableCut`): the cut moves only when the trigger fires, so
    the provider's cached prefix survives; ``store`` keeps what a handler that cannot be
    replayed wrote (``summarize``). ``cut="plain"`` reduces each call's whole input afresh.
    See :class:`ContextPolicyInputFilter` for what a call returns.
    """
    return ContextPolicyInputFilter(policy, counter=counter, handlers=handlers, cut=cut,
                                    store=store)


def _accepts_wrapper(method: Any) -> bool:
    # The SDK passes a run's context (``wrapper=``) only to sessions whose every method takes
    # it; the wrapper's methods all do, and hand it on to the methods of the wrapped session
    # that take it too.
    try:
        parameters = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "wrapper" and p.kind in (
        inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY,
    ) for p in parameters)


async def _call(method: Any, *args: Any, **kwargs: Any) -> Any:
    value = method(*args, **kwargs)
    return await value if inspect.isawaitable(value) else value


class ContextPolicySession(_Reports):
    """An SDK ``Session`` whose history reads are reduced by a context policy.

    Everything is delegated to ``session`` (the wrapped session, kept as the attribute of that
    name): ``add_items``, ``pop_item`` and ``clear_session`` act on the store, and any other
    attribute is the wrapped session's. ``get_items()`` returns the stored items reduced by the
    policy (split as the module docstring says, without a question: every item after the
    leading system items is ``history``, and ``turn`` is empty); the store keeps
    every item. A read with a ``limit`` (the SDK reads the last N items that way to check its
    own writes on retries and resumed runs) returns the stored items unreduced, so the SDK's
    bookkeeping sees the store as it is; a ``SessionSettings(limit=...)`` therefore applies
    instead of the policy. ``last_report`` is the report of the latest reduced read.
    ``cut`` and ``store`` are the filter's (:func:`context_policy_input_filter`): by default a
    read gets what the history would hold had the policy run before each earlier model call.
    A usage-anchored counter is not fed here: the model is sent the history with the run's
    new input, instructions and tools, so no reported figure is the count of the history
    alone (give the counter to a filter, with its ``hooks``).
    """

    def __init__(self, session: Any, policy: Any, *, counter: Any = None,
                 handlers: Mapping[str, Callable[..., Any]] | None = None,
                 cut: str = "stable", store: Any = None) -> None:
        self.session = session
        self._reducer = _Reducer(policy, counter, handlers, cut, store)
        self._wrapper_methods = frozenset(
            name for name in ("get_items", "add_items", "pop_item", "clear_session")
            if _accepts_wrapper(getattr(session, name, None))
        )

    @property
    def session_id(self) -> str:
        return self.session.session_id  # type: ignore[no-any-return]

    @property
    def session_settings(self) -> Any:
        return getattr(self.session, "session_settings", None)

    @session_settings.setter
    def session_settings(self, value: Any) -> None:
        self.session.session_settings = value

    def _context(self, name: str, wrapper: Any) -> dict[str, Any]:
        return {"wrapper": wrapper} if wrapper is not None and name in self._wrapper_methods \
            else {}

    async def get_items(self, limit: int | None = None, *, wrapper: Any = None) -> list[Any]:
        """The stored items reduced by the policy; with a ``limit``, the last ``limit`` stored
        items as they are."""
        context = self._context("get_items", wrapper)
        if limit is not None:
            return await _call(  # type: ignore[no-any-return]
                self.session.get_items, limit=limit, **context)
        items = await _call(self.session.get_items, **context)
        return await self._reducer.areduce(None, items, question=False)

    async def add_items(self, items: list[Any], *, wrapper: Any = None) -> None:
        await _call(self.session.add_items, items, **self._context("add_items", wrapper))

    async def pop_item(self, *, wrapper: Any = None) -> Any:
        return await _call(self.session.pop_item, **self._context("pop_item", wrapper))

    async def clear_session(self, *, wrapper: Any = None) -> None:
        await _call(self.session.clear_session, **self._context("clear_session", wrapper))

    def __getattr__(self, name: str) -> Any:
        # Only names this class does not define arrive here (run_compaction, close, ...).
        if name == "session":  # before __init__ set it: no recursion
            raise AttributeError(name)
        return getattr(self.session, name)

    def __repr__(self) -> str:
        return f"ContextPolicySession({self.session!r}, {self.policy!r})"
