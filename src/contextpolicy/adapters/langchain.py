"""A context policy inside LangChain and LangGraph (extra ``[langchain]``).

- :class:`ContextPolicyMiddleware`: a LangChain v1 agent middleware (``create_agent(...,
  middleware=[...])``). ``mode="ephemeral"`` reduces what each model call is sent and leaves the
  agent's state as it is, by default with the cache-stable cut (:mod:`contextpolicy.stable`: a
  call gets what a persisted reduction would hold, so the provider's cached prefix survives);
  ``mode="persist"`` writes the reduction back to the state.
- :func:`context_policy_node`: a LangGraph node (sync and async) that reduces a state's messages,
  streams the policy's events through the graph's ``custom`` stream, and stops with its task.
- :func:`langchain_token_counter`: one of this library's token counters as the
  ``token_counter`` of LangChain's own middleware (``SummarizationMiddleware``,
  ``ContextEditingMiddleware``), counting exactly what the policy counts.
- :func:`to_chat_dicts`: LangChain messages as the chat dicts the policy measures, one each.

The messages make the plan every adapter makes (``_agent``), so one policy file works here and
in the OpenAI Agents SDK: ``system`` (the agent's system prompt, then the leading system
messages) and ``question`` (the last human message that opens a turn) are protected and reach
the model unchanged; ``history`` (what came before the question) and ``turn`` (the agent's tool
calls and results since the question) are the fragments a policy step may name, and each is
reduced only by a step that names it. The model is handed the original message objects the
policy kept (ids and metadata intact, in order), never copies, and so is the state in persist
mode, a compress step's included: a message its handler left as it was is the original object;
one it changed is the original with only that change (``model_copy``: the id, name, metadata,
usage, ``additional_kwargs`` with a legacy ``function_call``, a tool message's ``artifact`` and
``status`` are the original's; a call whose ``tool_use`` block was emptied has its
``tool_calls`` entry emptied too; invalid tool calls stay invalid, as they were); only a
message no original stands behind (a summary) is new.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, cast

try:
    from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest
    from langchain_core.messages import AnyMessage, BaseMessage, RemoveMessage, SystemMessage
    from langchain_core.runnables import RunnableLambda
    from langgraph.config import get_stream_writer
    from langgraph.graph.message import REMOVE_ALL_MESSAGES
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    raise ImportError(
        "contextpolicy.adapters.langchain needs LangChain v1 and LangGraph: "
        "pip install contextpolicy[langchain]"
    ) from exc

from ..accounting import TokenCounter
from ..core import aprocess_context, process_context
from ..errors import ContextPolicyError
from ..prepared import PreparedPolicy
from ..report import ContextEvent, ContextReport, ContextResult
from ..stable import CutReport, StableCut, StableResult, checked_cut
from ._agent import FRAGMENT_IDS, prepare_agent_policy
from ._langchain_messages import (
    Split,
    as_messages,
    chat_dict,
    chat_dicts,
    request_tools,
    split_messages,
    traced,
)
from ._usage import anchored_counter, record_usage
from ._usage_feed import StateFeed, langchain_input_tokens

__all__ = [
    "FRAGMENT_IDS",
    "ContextPolicyMiddleware",
    "context_policy_node",
    "langchain_token_counter",
    "to_chat_dicts",
]

MODES = ("ephemeral", "persist")
# The key of every event a node streams: {"contextpolicy": event.type, **event.data}.
STREAM_KEY = "contextpolicy"

Handlers = Mapping[str, Callable[..., Any]]


def to_chat_dicts(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """The chat dicts the policy measures for ``messages``, one per message (``content`` is the
    message's own object): what ``check_input_budget`` and ``process_context`` read."""
    return chat_dicts(messages)


def _replacement(split: Split, result: ContextResult) -> list[BaseMessage] | None:
    """The messages to put in place of the split's, or ``None`` when the policy kept them all."""
    kept = split.kept(result)
    return None if split.unchanged(kept) else kept


class ContextPolicyMiddleware(AgentMiddleware[AgentState[Any], Any]):
    """A context policy on every model call of a LangChain v1 agent (``create_agent``).

    ``policy``: a policy document, a typed policy or a :class:`~contextpolicy.PreparedPolicy`
    (which carries its handlers and counter: pass neither beside it), checked once here: a bad
    policy, an unknown handler, a token watermark without a counter, a step naming a fragment
    other than ``history`` or ``turn``, or an audit raise
    :class:`~contextpolicy.ContextPolicyError` at construction, every problem at once.

    ``mode="ephemeral"`` (``wrap_model_call``): each call's messages are reduced for that call
    only; the system message counts as the protected ``system`` fragment and is sent as it was,
    the schemas of the request's tools as the protected ``tools`` fragment;
    the state keeps every message. ``cut="stable"`` (the default) sends each call what a
    persisted reduction would hold (:class:`~contextpolicy.stable.StableCut`: the cut moves only
    when the trigger fires, so a prompt cache keeps its prefix; ``last_cut`` says what it did,
    ``store`` keeps what ``summarize`` wrote); ``cut="plain"`` reduces each call's whole history
    afresh. ``mode="persist"`` (``before_model``): the state's messages
    are reduced and the state is updated (``RemoveMessage(REMOVE_ALL_MESSAGES)`` and the kept
    messages) when something was removed; the agent's system prompt is not in the state, so it
    is not counted there.

    The report of the latest call is ``last_report`` (of the instance: with concurrent runs of
    one agent, use ``on_report``, called with each report); ``on_event`` receives every
    :class:`~contextpolicy.ContextEvent` as it happens; ``cancel`` (a ``threading.Event``) stops
    a run with :class:`~contextpolicy.ContextCancelledError`; ``name`` tells two instances in
    one agent apart (a persisting one and an ephemeral one, say). Async agents (``ainvoke``)
    run the policy with ``aprocess_context``: handlers may be coroutine functions, and
    cancelling the task cancels the run.

    With ``counter=usage_anchored(...)`` (:func:`~contextpolicy.counters.usage_anchored`) each
    model call's reported input tokens (its AI message's ``usage_metadata``) are recorded for
    the input it was sent: the call's answer in ephemeral mode; in persist mode (and in
    :func:`context_policy_node`) the AI message right after the persisted messages, at the
    next call.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> ContextPolicyMiddleware:
        # create_agent wires the hooks a class defines, so each mode is a class of its own.
        if cls is ContextPolicyMiddleware and kwargs.get("mode") == "persist":
            cls = _PersistingMiddleware
        return object.__new__(cls)

    def __init__(
        self,
        policy: Any,
        *,
        counter: Any = None,
        handlers: Handlers | None = None,
        mode: str = "ephemeral",
        on_report: Callable[[ContextReport], None] | None = None,
        on_event: Callable[[ContextEvent], None] | None = None,
        cancel: Any = None,
        name: str = "ContextPolicyMiddleware",
        cut: str = "stable",
        store: Any = None,
    ) -> None:
        super().__init__()
        if mode not in MODES:
            raise ContextPolicyError(f"expected 'ephemeral' or 'persist', got {mode!r}",
                                     path="mode", code="invalid-option")
        checked_cut(cut)
        if (mode == "persist") != isinstance(self, _PersistingMiddleware):
            raise TypeError(f"mode={mode!r} on a subclass of ContextPolicyMiddleware: the mode "
                            "is the class (subclass the middleware of that mode)")
        self.mode = mode
        self._name = name
        self.on_report = on_report
        self.on_event = on_event
        self.cancel = cancel
        self._prepared: PreparedPolicy = prepare_agent_policy(policy, handlers, counter)
        self._last: ContextResult | None = None
        self.cut = cut
        # Each tool's schema, converted once (LangChain builds it from the tool's pydantic
        # model: some 70 us a tool, on every model call otherwise).
        self._tool_schemas: dict[int, tuple[Any, Any]] = {}
        # A persisted reduction is stable by itself: the state it writes is the next call's.
        self._stable = StableCut(self._prepared, store=store) if (
            mode == "ephemeral" and cut == "stable") else None
        # A usage-anchored counter is fed each call's reported input tokens (else None).
        self._usage = anchored_counter(self._prepared)
        self._feed = StateFeed(self._usage) if self._usage is not None and (
            mode == "persist") else None

    @property
    def name(self) -> str:
        """The middleware's name in the agent (its hook node is ``{name}.before_model``); two
        instances in one agent need two names."""
        return self._name

    @property
    def policy(self) -> Any:
        """The typed policy."""
        return self._prepared.policy

    @property
    def last_report(self) -> ContextReport | None:
        """The report of this instance's latest run (``None`` before the first)."""
        return None if self._last is None else self._last.report

    @property
    def last_cut(self) -> CutReport | None:
        """What the stable cut did in this instance's latest run (``None`` before the first,
        or without the stable cut)."""
        return self._last.cut if isinstance(self._last, StableResult) else None

    def _finished(self, result: ContextResult) -> None:
        self._last = result
        if self.on_report is not None:
            self.on_report(result.report)

    def _run(self, split: Split) -> tuple[list[BaseMessage] | None, ContextResult]:
        result = process_context(split.plan, self._prepared, on_event=self.on_event,
                                 cancel=self.cancel)
        self._finished(result)
        return _replacement(split, result), result

    async def _arun(self, split: Split) -> tuple[list[BaseMessage] | None, ContextResult]:
        result = await aprocess_context(split.plan, self._prepared, on_event=self.on_event,
                                        cancel=self.cancel)
        self._finished(result)
        return _replacement(split, result), result

    def _stable_kept(
        self, request: ModelRequest[Any], dicts: list[dict[str, Any]],
        apart: dict[str, Any] | None, tools: str | None, result: StableResult,
    ) -> list[BaseMessage] | None:
        self._finished(result)
        messages = request.messages
        kept = traced(messages, dicts, result, (apart is not None) + (tools is not None))
        same = len(kept) == len(messages) and all(
            a is b for a, b in zip(kept, messages, strict=True))
        return None if same else kept

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], Any]
    ) -> Any:
        if self._stable is None:
            kept, result = self._run(_request_split(request, self._tool_schemas))
        else:
            dicts, apart = _request_dicts(request)
            tools = request_tools(request.tools, self._tool_schemas)
            result = self._stable.process(dicts, lead=[apart] if apart is not None else (),
                                          on_event=self.on_event, cancel=self.cancel,
                                          path="request.messages", tools=tools)
            kept = self._stable_kept(request, dicts, apart, tools, result)
        response = handler(_with_messages(request, kept))
        if self._usage is not None:  # the input tokens reported for what was sent
            record_usage(self._usage, result, langchain_input_tokens(response))
        return response

    async def awrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], Awaitable[Any]]
    ) -> Any:
        if self._stable is None:
            kept, result = await self._arun(_request_split(request, self._tool_schemas))
        else:
            dicts, apart = _request_dicts(request)
            tools = request_tools(request.tools, self._tool_schemas)
            result = await self._stable.aprocess(
                dicts, lead=[apart] if apart is not None else (), on_event=self.on_event,
                cancel=self.cancel, path="request.messages", tools=tools)
            kept = self._stable_kept(request, dicts, apart, tools, result)
        response = await handler(_with_messages(request, kept))
        if self._usage is not None:
            record_usage(self._usage, result, langchain_input_tokens(response))
        return response


class _PersistingMiddleware(ContextPolicyMiddleware):
    """``ContextPolicyMiddleware(mode="persist")``: the reduction is written to the state."""

    # Not a model-call wrapper: create_agent wires a hook only where a class defines it.
    wrap_model_call = AgentMiddleware.wrap_model_call  # type: ignore[assignment]
    awrap_model_call = AgentMiddleware.awrap_model_call  # type: ignore[assignment]

    def before_model(self, state: AgentState[Any], runtime: Any) -> dict[str, Any] | None:
        messages = state["messages"]
        if self._feed is not None:
            self._feed.answered(messages)
        kept, result = self._run(split_messages(messages, path="state.messages"))
        if self._feed is not None:  # the state the model is sent, whose answer follows it
            self._feed.sent(messages if kept is None else kept, result)
        return None if kept is None else {"messages": _replace_all(kept)}

    async def abefore_model(self, state: AgentState[Any], runtime: Any) -> dict[str, Any] | None:
        messages = state["messages"]
        if self._feed is not None:
            self._feed.answered(messages)
        kept, result = await self._arun(split_messages(messages, path="state.messages"))
        if self._feed is not None:
            self._feed.sent(messages if kept is None else kept, result)
        return None if kept is None else {"messages": _replace_all(kept)}


def _request_system(request: ModelRequest[Any]) -> SystemMessage | None:
    system = getattr(request, "system_message", None)
    if system is None and getattr(request, "system_prompt", None) is not None:
        system = SystemMessage(content=request.system_prompt)  # langchain before system_message
    return system


def _request_split(request: ModelRequest[Any], known: dict[int, tuple[Any, Any]]) -> Split:
    return split_messages(request.messages, _request_system(request), "request.messages",
                          request_tools(request.tools, known))


def _request_dicts(request: ModelRequest[Any]) -> tuple[list[dict[str, Any]],
                                                        dict[str, Any] | None]:
    """The chat dicts of a request's messages, and of its system message given apart."""
    system = _request_system(request)
    return (chat_dicts(request.messages, "request.messages"),
            chat_dict(system) if system is not None else None)


def _with_messages(
    request: ModelRequest[Any], kept: list[BaseMessage] | None
) -> ModelRequest[Any]:
    """The request with the kept messages (the request itself when all were kept)."""
    return request if kept is None else request.override(messages=cast("list[AnyMessage]", kept))


def _replace_all(kept: list[BaseMessage]) -> list[BaseMessage]:
    return [RemoveMessage(id=REMOVE_ALL_MESSAGES), *kept]


def _stream_writer() -> Callable[[Any], None] | None:
    try:
        return get_stream_writer()
    except (RuntimeError, KeyError):  # not inside a graph run
        return None


def context_policy_node(
    policy: Any,
    *,
    counter: Any = None,
    handlers: Handlers | None = None,
    messages_key: str = "messages",
    cancel: Any = None,
    on_report: Callable[[ContextReport], None] | None = None,
    name: str = "context_policy",
) -> RunnableLambda[Mapping[str, Any], dict[str, Any]]:
    """A LangGraph node that reduces ``state[messages_key]`` with ``policy`` (checked once, here,
    as :class:`ContextPolicyMiddleware` checks it).

    The node returns ``{messages_key: [RemoveMessage(REMOVE_ALL_MESSAGES), *kept]}`` when the
    policy removed or replaced something (the key must use the ``add_messages`` reducer, as
    ``MessagesState`` does; ``kept`` are the state's own message objects, a message a compress
    handler changed being a copy of its original with that change only) and ``{}`` when
    nothing changed. Every event is written to the graph's stream writer as
    ``{"contextpolicy": event.type, **event.data}`` (``stream_mode="custom"`` yields them);
    ``on_report`` receives each run's report.

    It is one runnable for both worlds: ``graph.invoke`` runs ``process_context``, and
    ``graph.ainvoke``/``astream`` run ``aprocess_context`` (coroutine handlers allowed), where
    cancelling the graph's task cancels the run and the node writes no update. ``cancel`` (a
    ``threading.Event``) stops either with :class:`~contextpolicy.ContextCancelledError`.
    """
    prepared = prepare_agent_policy(policy, handlers, counter)
    path = f"state.{messages_key}"
    usage = anchored_counter(prepared)
    feed = StateFeed(usage) if usage is not None else None

    def events() -> Callable[[ContextEvent], None] | None:
        writer = _stream_writer()
        if writer is None:
            return None
        return lambda event: writer({STREAM_KEY: event.type, **event.data})

    def update(split: Split, result: ContextResult) -> dict[str, Any]:
        if on_report is not None:
            on_report(result.report)
        kept = _replacement(split, result)
        if feed is not None:
            feed.sent(split.messages if kept is None else kept, result)
        return {} if kept is None else {messages_key: _replace_all(kept)}

    def reduce_state(state: Mapping[str, Any]) -> dict[str, Any]:
        if feed is not None:  # the model's answer to the state the last run left
            feed.answered(state[messages_key])
        split = split_messages(state[messages_key], path=path)
        return update(split, process_context(split.plan, prepared, on_event=events(),
                                             cancel=cancel))

    async def areduce_state(state: Mapping[str, Any]) -> dict[str, Any]:
        if feed is not None:
            feed.answered(state[messages_key])
        split = split_messages(state[messages_key], path=path)
        return update(split, await aprocess_context(split.plan, prepared, on_event=events(),
                                                    cancel=cancel))

    return RunnableLambda(reduce_state, afunc=areduce_state, name=name)


def langchain_token_counter(counter: Any) -> Callable[[Iterable[Any]], int]:
    """``counter`` (a callable ``str -> int`` or an object with ``count_text``, and optionally
    ``count_messages``) as a LangChain token counter: a function of a list of messages (or
    anything LangChain converts to messages) to tokens, for the ``token_counter`` of
    ``SummarizationMiddleware`` and ``ContextEditingMiddleware``.

    It counts what this library counts for the same messages: ``count_messages`` of their chat
    dicts (:func:`to_chat_dicts`) when the counter has it, else ``count_text`` over every text
    piece the characters count (``check_input_budget(to_chat_dicts(m), counter=counter)``).
    A counter that is neither raises :class:`~contextpolicy.ContextPolicyError` here.
    """
    tc = TokenCounter(counter)

    def count_tokens(messages: Iterable[Any]) -> int:
        return tc.count_messages(chat_dicts(as_messages(messages)))

    name = getattr(counter, "name", None)
    count_tokens.__qualname__ = count_tokens.__name__ = (
        f"contextpolicy_{name}" if isinstance(name, str) else "contextpolicy_tokens"
    )
    return count_tokens
