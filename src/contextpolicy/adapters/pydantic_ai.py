"""A context policy inside Pydantic AI 2 (extra ``[pydantic-ai]``).

- :class:`ContextPolicyProcessor`: a history processor, for ``capabilities=[ProcessHistory(
  processor)]``. Pydantic AI keeps what a history processor returns as the run's history
  (``ProcessHistory`` writes it back to ``RunContext.messages``, and ``result.all_messages()``
  is that history): this is the **persist** mode. A reduction, once made, stays, so each call's
  input starts as the previous one's did until the trigger fires again (stable by itself).
- :class:`ContextPolicyCapability`: a capability, for ``capabilities=[...]``, that reduces what
  each model request is sent and leaves the run's history whole (it sets the request's own
  message list, ``ModelRequestContext.messages``, never ``RunContext.messages``): the
  **ephemeral** mode, by default with the cache-stable cut (:mod:`contextpolicy.stable`: a
  request gets what a persisted reduction would hold, so a provider's cached prefix survives).

Both split the messages into the fragments every adapter makes (``_agent``), so one policy file
works here, in LangChain and in the OpenAI Agents SDK:

- ``instructions``: the request's instructions (the agent's ``instructions``, static and
  dynamic, as the request records them), a protected text fragment; absent when there are none;
- ``tools``: the schemas of the tools the model is offered (its function and output tools, by
  name, description and parameters' JSON schema), a protected text fragment: the model reads
  them with every request, so they count against the trigger. The capability reads them from
  the request; the processor from the run step's tools, when it is given the ``RunContext``
  (Pydantic AI gives it one);
- ``system``: the leading system prompt parts (the agent's ``system_prompt``, protected);
- ``history``: everything between those and the question;
- ``question``: the last ``UserPromptPart`` (protected); a retry's feedback never is one;
- ``turn``: everything after it: the model's tool calls and the tool returns of the turn in
  progress, reduced only by a step that names ``turn``.

Messages become chat dicts (``_pydantic_ai_messages``: one dict per part of a ``ModelRequest``,
one per ``ModelResponse``) measured by the library's accounting rules; a trim keeps whole user
turns, so a ``ToolCallPart`` never loses its ``ToolReturnPart``. The result is the caller's own
message objects for everything kept, in order; a ``ModelRequest`` some of whose parts were
dropped or changed, and a ``ModelResponse`` a compress handler changed, are copies with only
that difference; a summary is a new message. Nothing given is mutated.

With ``counter=usage_anchored(...)`` (:func:`~contextpolicy.counters.usage_anchored`) each
request's reported input tokens (its ``ModelResponse``'s ``usage.input_tokens``) are recorded
for the input the policy assembled for it, so later figures start from the provider's count:
the capability takes them from the response it is handed (``after_model_request``), the
processor from the ``ModelResponse`` that follows the messages it returned, at the next call.

Importing this module imports Pydantic AI, and says which extra to install when it is missing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, overload

try:
    from pydantic_ai import RunContext
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.messages import InstructionPart, ModelMessage, ModelRequest, ModelResponse
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    raise ImportError(
        "contextpolicy.adapters.pydantic_ai needs Pydantic AI 2: "
        "pip install 'contextpolicy[pydantic-ai]'"
    ) from exc

from ..content import same
from ..core import aprocess_context, process_context
from ..errors import ContextPlanError
from ..prepared import is_async_callable
from ..stable import CutReport, StableCut, StableResult, checked_cut
from ._agent import FRAGMENT_IDS, agent_plan, prepare_agent_policy, tools_text
from ._pydantic_ai_messages import Dicts, chat_dicts
from ._returned import origins, trimmed_away
from ._usage import anchored_counter
from ._usage_frameworks import SentInputs

if TYPE_CHECKING:
    from pydantic_ai.models import ModelRequestContext

    from ..prepared import PreparedPolicy
    from ..report import ContextEvent, ContextReport, ContextResult

__all__ = ["FRAGMENT_IDS", "ContextPolicyCapability", "ContextPolicyProcessor", "request_tools",
           "run_tools", "to_chat_dicts"]

Handlers = Mapping[str, Callable[..., Any]]


def to_chat_dicts(messages: Sequence[ModelMessage]) -> list[dict[str, Any]]:
    """The chat dicts the policy measures for ``messages`` (one per part of a request, one per
    response): what ``check_input_budget`` and ``process_context`` read."""
    return chat_dicts(messages).dicts


def _instructions_of(messages: Sequence[Any]) -> str | None:
    """The instructions of the request being prepared: Pydantic AI records them on the last
    ``ModelRequest`` before any hook runs."""
    for message in reversed(messages):
        if isinstance(message, ModelRequest):
            instructions = message.instructions
            return instructions if isinstance(instructions, str) else None
    return None


def _tool_schema(tool: Any) -> dict[str, Any]:
    """What the model is told of a tool (a ``ToolDefinition``)."""
    return {"type": "function", "name": tool.name, "description": tool.description,
            "parameters": tool.parameters_json_schema}


def request_tools(parameters: Any) -> str | None:
    """The ``tools`` fragment's text of a request (``ModelRequestParameters``): its function
    tools as the provider is given them, its output tools, and its native tools by kind."""
    functions = getattr(parameters, "declared_function_tools", None)
    if functions is None:
        functions = parameters.function_tools
    schemas = [_tool_schema(t) for t in (*functions, *parameters.output_tools)]
    schemas += [{"type": getattr(t, "kind", type(t).__name__)}
                for t in getattr(parameters, "native_tools", None) or ()]
    return tools_text(schemas)


def run_tools(ctx: RunContext[Any] | None) -> str | None:
    """The ``tools`` fragment's text of a run step (``ctx.tool_manager``): its function tools,
    then its output tools, as a request lists them; deferred ones are not offered."""
    manager = getattr(ctx, "tool_manager", None)
    try:
        defs = list(manager.tool_defs) if manager is not None else []
    except ValueError:  # a manager not prepared for this step
        defs = []
    defs = sorted((t for t in defs if not getattr(t, "defer_loading", False)),
                  key=lambda t: t.kind == "output")
    return tools_text([_tool_schema(t) for t in defs])


class _Reducer:
    """A prepared policy, how it is applied (cut, events, cancellation) and its last result:
    what the processor and the capability share."""

    def __init__(self, policy: Any, counter: Any, handlers: Handlers | None, cut: str,
                 store: Any, on_report: Callable[[ContextReport], None] | None,
                 on_event: Callable[[ContextEvent], None] | None, cancel: Any) -> None:
        checked_cut(cut)
        self.prepared = prepare_agent_policy(policy, handlers, counter)
        self.is_async = any(is_async_callable(h) for h in self.prepared.handlers.values())
        self.stable = StableCut(self.prepared, store=store) if cut == "stable" else None
        self.on_report, self.on_event, self.cancel = on_report, on_event, cancel
        self.last_result: ContextResult | None = None
        # With a usage-anchored counter, what was sent, until its answer's usage is recorded.
        usage = anchored_counter(self.prepared)
        self.sent = SentInputs(usage) if usage is not None else None

    def _options(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.on_event is not None:
            out["on_event"] = self.on_event
        if self.cancel is not None:
            out["cancel"] = self.cancel
        return out

    def reduce(self, messages: Sequence[Any], instructions: str | None, tools: str | None,
               path: str) -> list[Any]:
        given = chat_dicts(_listed(messages, path), path)
        try:
            if self.stable is not None:
                stable = self.stable.process(given.dicts, instructions=instructions,
                                             tools=tools, path="messages", **self._options())
            else:
                plan = agent_plan(given.dicts, instructions=instructions, tools=tools)
                result = process_context(plan, self.prepared, **self._options())
        except ContextPlanError as exc:
            raise given.located(exc) from None
        if self.stable is not None:
            return self._traced(given, stable, (instructions is not None) + (tools is not None))
        return self._kept(given, result, (instructions is not None) + (tools is not None))

    async def areduce(self, messages: Sequence[Any], instructions: str | None,
                      tools: str | None, path: str) -> list[Any]:
        given = chat_dicts(_listed(messages, path), path)
        try:
            if self.stable is not None:
                stable = await self.stable.aprocess(given.dicts, instructions=instructions,
                                                    tools=tools, path="messages",
                                                    **self._options())
            else:
                plan = agent_plan(given.dicts, instructions=instructions, tools=tools)
                result = await aprocess_context(plan, self.prepared, **self._options())
        except ContextPlanError as exc:
            raise given.located(exc) from None
        if self.stable is not None:
            return self._traced(given, stable, (instructions is not None) + (tools is not None))
        return self._kept(given, result, (instructions is not None) + (tools is not None))

    def _traced(self, given: Dicts, result: StableResult, skip: int) -> list[Any]:
        # The first ``skip`` of the input are the instructions and the tools, as one message each.
        dicts = given.dicts
        kept = [(s, s >= 0 and (d is dicts[s] or same(d, dicts[s])), d)
                for d, s in zip(result.input[skip:], result.sources[skip:], strict=True)]
        return self._finished(given, result, kept, skip)

    def _kept(self, given: Dicts, result: ContextResult, skip: int) -> list[Any]:
        returned = result.input[skip:]

        def away() -> set[int]:
            fragments = [(f.id, f.messages) for f in result.plan.fragments
                         if f.messages is not None]
            return trimmed_away(fragments, result.report.steps, given.dicts)

        kept = [(o.source, o.unchanged, d) if o is not None else (-1, False, d)
                for d, o in zip(returned, origins(given.dicts, returned, away), strict=True)]
        return self._finished(given, result, kept, skip)

    def _finished(self, given: Dicts, result: ContextResult,
                  kept: list[tuple[int, bool, dict[str, Any]]], skip: int) -> list[Any]:
        messages = given.back(kept, skip)
        if given.messages:
            # Pydantic AI sends a history that ends with a request, or, when it resumes a
            # response the provider paused, with that response.
            want = type(given.messages[-1])
            if not messages or not isinstance(messages[-1], want):
                raise ContextPlanError(
                    f"the policy left no {want.__name__} at the end of the messages, where "
                    "Pydantic AI needs one: keep the newest group of the fragment a step "
                    "reduces (keepGroups >= 1)", path=given.path, code="unsupported-message")
        self.last_result = result
        if self.sent is not None:
            self.sent.sent(messages, result)
        if self.on_report is not None:
            self.on_report(result.report)
        return messages


def _listed(messages: Any, path: str) -> list[Any]:
    if not isinstance(messages, (list, tuple)):
        raise ContextPlanError(f"expected a list of Pydantic AI messages, got "
                               f"{type(messages).__name__}", path=path, code="invalid-messages")
    return list(messages)


class _Reports:
    """The policy and the last result of a :class:`_Reducer`, as both front ends show them."""

    _reducer: _Reducer

    @property
    def policy(self) -> PreparedPolicy:
        """The policy as checked once, with its handlers and counter."""
        return self._reducer.prepared

    @property
    def is_async(self) -> bool:
        """Whether some handler is a coroutine function (the processor's sync call then
        returns an awaitable, which Pydantic AI awaits)."""
        return self._reducer.is_async

    @property
    def last_result(self) -> ContextResult | None:
        """The whole :class:`~contextpolicy.ContextResult` of the latest call."""
        return self._reducer.last_result

    @property
    def last_report(self) -> ContextReport | None:
        """The report of the latest call (``None`` before the first). With one instance shared
        by concurrent runs it is whichever finished last: use ``on_report`` there."""
        result = self._reducer.last_result
        return result.report if result is not None else None

    @property
    def last_cut(self) -> CutReport | None:
        """What the stable cut did in the latest call (``None`` before it, or without the
        stable cut)."""
        result = self._reducer.last_result
        return result.cut if isinstance(result, StableResult) else None


def _split_args(ctx: Any, messages: Any, name: str) -> tuple[RunContext[Any] | None, Any]:
    """The run context and the messages of a call made as ``(ctx, messages)`` or
    ``(messages)``."""
    if messages is _NOTHING:
        return None, ctx
    if not isinstance(ctx, RunContext):
        raise TypeError(f"{name} takes the messages, or a RunContext and the messages; got a "
                        f"{type(ctx).__name__} before the messages")
    return ctx, messages


_NOTHING: Any = object()


class ContextPolicyProcessor(_Reports):
    """A Pydantic AI history processor that runs a context policy before every model request:
    ``Agent(..., capabilities=[ProcessHistory(processor)])``. **Persist mode**: Pydantic AI
    keeps what a processor returns as the run's history, so a reduction stays reduced (and
    ``result.all_messages()`` holds the reduced history).

    ``policy``: a policy document, a typed policy or a :class:`~contextpolicy.PreparedPolicy`
    (which carries its handlers and counter: pass neither beside it), checked once here: a bad
    policy, an unknown handler, a token watermark without a counter, a step naming a fragment
    other than ``history`` or ``turn``, or an audit raise
    :class:`~contextpolicy.ContextPolicyError` at construction, every problem at once.

    Called with a ``RunContext`` and the messages (as Pydantic AI calls it: the run step's tools
    are the ``tools`` fragment), or with the messages alone (no ``tools`` fragment), it returns
    the kept messages (see the module docstring). The call is
    synchronous (Pydantic AI runs it in a worker thread); when some handler is a coroutine
    function it returns an awaitable instead, which Pydantic AI awaits. :meth:`areduce` is the
    async variant: ``ProcessHistory(processor.areduce)`` runs on the event loop, handlers sync
    or async. ``on_report`` receives each call's report, ``on_event`` every
    :class:`~contextpolicy.ContextEvent`; ``cancel`` (a ``threading.Event``) stops a call with
    :class:`~contextpolicy.ContextCancelledError`. A persisted reduction is stable by itself,
    so there is no ``cut`` to choose.
    """

    def __init__(self, policy: Any, *, counter: Any = None, handlers: Handlers | None = None,
                 on_report: Callable[[ContextReport], None] | None = None,
                 on_event: Callable[[ContextEvent], None] | None = None,
                 cancel: Any = None) -> None:
        self._reducer = _Reducer(policy, counter, handlers, "plain", None, on_report, on_event,
                                 cancel)

    # Pydantic AI hands a processor its RunContext when the first parameter is annotated as one
    # (the overloads say the two ways to call it; the implementation's annotation is that sign).
    @overload
    def __call__(self, messages: list[ModelMessage], /) -> list[ModelMessage]: ...
    @overload
    def __call__(self, ctx: RunContext[Any], messages: list[ModelMessage], /
                 ) -> list[ModelMessage]: ...

    def __call__(self, ctx: RunContext[Any], messages: Any = _NOTHING, /  # type: ignore[misc]
                 ) -> Any:
        context, messages = _split_args(ctx, messages, "ContextPolicyProcessor")
        _listed(messages, "messages")  # not a list: the one clear error, before anything reads it
        if self._reducer.sent is not None:  # the answer to what the last call returned
            self._reducer.sent.answered_in_history(messages)
        if self._reducer.is_async:
            return self._areduce(context, messages)
        return self._reducer.reduce(messages, _instructions_of(messages), run_tools(context),
                                    "messages")

    @overload
    async def areduce(self, messages: list[ModelMessage], /) -> list[ModelMessage]: ...
    @overload
    async def areduce(self, ctx: RunContext[Any], messages: list[ModelMessage], /
                      ) -> list[ModelMessage]: ...

    async def areduce(self, ctx: RunContext[Any], messages: Any = _NOTHING, /  # type: ignore[misc]
                      ) -> Any:
        """The processor for async code (``ProcessHistory(processor.areduce)``)."""
        context, messages = _split_args(ctx, messages, "areduce")
        _listed(messages, "messages")
        if self._reducer.sent is not None:  # the answer to what the last call returned
            self._reducer.sent.answered_in_history(messages)
        return await self._areduce(context, messages)

    async def _areduce(self, context: RunContext[Any] | None, messages: Any) -> list[Any]:
        return await self._reducer.areduce(messages, _instructions_of(messages),
                                           run_tools(context), "messages")

    def __repr__(self) -> str:
        return f"ContextPolicyProcessor({self.policy!r})"


class ContextPolicyCapability(AbstractCapability[Any], _Reports):
    """A Pydantic AI capability that reduces what each model request is sent:
    ``Agent(..., capabilities=[ContextPolicyCapability(policy)])``. **Ephemeral mode**: the
    run's history keeps every message; only the request's own list of messages is reduced
    (``before_model_request``), with the instructions and the tools the request carries
    (``model_request_parameters``) counted as the protected ``instructions`` and ``tools``
    fragments.

    ``cut="stable"`` (the default) sends each request what a persisted reduction would hold
    (:class:`~contextpolicy.stable.StableCut`: the cut moves only when the trigger fires, so a
    prompt cache keeps its prefix; ``last_cut`` says what it did, ``store`` keeps what
    ``summarize`` wrote); ``cut="plain"`` reduces each request's whole history afresh.
    ``policy``, ``counter``, ``handlers``, ``on_report``, ``on_event`` and ``cancel`` are the
    processor's (:class:`ContextPolicyProcessor`); handlers may be coroutine functions.
    """

    def __init__(self, policy: Any, *, counter: Any = None, handlers: Handlers | None = None,
                 on_report: Callable[[ContextReport], None] | None = None,
                 on_event: Callable[[ContextEvent], None] | None = None,
                 cancel: Any = None, cut: str = "stable", store: Any = None) -> None:
        self._reducer = _Reducer(policy, counter, handlers, cut, store, on_report, on_event,
                                 cancel)
        self.cut = cut

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None  # takes a policy and callables: not built from an agent spec

    async def before_model_request(self, ctx: RunContext[Any],
                                   request_context: ModelRequestContext) -> ModelRequestContext:
        messages = request_context.messages
        parts = request_context.model_request_parameters.instruction_parts
        instructions = (InstructionPart.join(parts) if parts is not None
                        else _instructions_of(messages))
        kept = await self._reducer.areduce(messages, instructions,
                                           request_tools(request_context.model_request_parameters),
                                           "request_context.messages")
        if len(kept) != len(messages) or any(a is not b for a, b in zip(kept, messages,
                                                                       strict=True)):
            request_context.messages = kept  # this request only: the history stays whole
        return request_context

    async def after_model_request(self, ctx: RunContext[Any], *,
                                  request_context: ModelRequestContext,
                                  response: ModelResponse) -> ModelResponse:
        if self._reducer.sent is not None:  # its usage, for the messages it answered
            self._reducer.sent.answered(request_context.messages, response)
        return response

    def __repr__(self) -> str:
        return f"ContextPolicyCapability({self.policy!r}, cut={self.cut!r})"
