"""A context policy for LiteLLM (extra ``[litellm]``): the messages of a ``completion`` call,
a token counter backed by ``litellm.token_counter``, and a proxy hook.

- :func:`apply_policy` has the ergonomics of ``litellm.utils.trim_messages``: messages in, the
  messages the policy keeps out, ready for ``litellm.completion(model, messages=...)``. Unlike
  ``trim_messages`` it never separates a tool call from its result, never touches the system
  prompt or the question, and its :class:`ContextPolicyMessages` form says what it did.
- :class:`ContextPolicyMessages` is the same for many calls: the policy checked once, a memo
  for the stable cut, ``last_report`` and ``last_cut``.
- :func:`litellm_token_counter` counts with LiteLLM's tokenizer for a model and says whether
  that count is the model's own (``exact``) or LiteLLM's stand-in (``cl100k_base`` for models
  whose tokenizer it does not have, Claude 3 and later and GPT-4o among them).
- :func:`context_policy_hook` is a ``CustomLogger`` whose ``async_pre_call_hook`` applies a
  policy to the messages of every chat request a LiteLLM proxy serves.

Messages are OpenAI chat dicts (or LiteLLM's ``Message`` objects from an earlier response, which
are returned as the very objects given when kept). They make the plan every adapter makes
(``_agent``): leading ``system`` messages protected, ``history``, the ``question`` (the last user
message that opens a turn) and the ``turn`` after it, so one policy file works here, in
LangChain and in the OpenAI Agents SDK. The default cut is the stable one
(:class:`~contextpolicy.StableCut`): a prompt cache keeps its prefix from call to call.

Importing this module does not import LiteLLM; a counter or a hook does, and says which extra to
install when it is missing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..core import aprocess_context, process_context
from ..counters._base import checked_count, exact_text, import_extra
from ..errors import ContextPlanError, ContextPolicyError
from ..prepared import is_async_callable
from ..stable import CutReport, StableCut, checked_cut
from ._agent import agent_plan, prepare_agent_policy, tools_text
from ._items import LastResult, as_items, kept_items, traced_items
from ._usage import anchored_counter, record_usage
from ._usage_feed import Pending

if TYPE_CHECKING:
    from ..prepared import PreparedPolicy
    from ..report import ContextReport, ContextResult

__all__ = [
    "ContextPolicyMessages",
    "LiteLLMCounter",
    "apply_policy",
    "context_policy_hook",
    "litellm_token_counter",
]

# The proxy's call types whose data carry OpenAI chat messages, the system prompt among them
# (Anthropic's /v1/messages keeps it apart, and the Responses API sends ``input``: neither is
# reduced here).
CHAT_CALL_TYPES = frozenset({"completion", "acompletion"})
_TIKTOKEN_EXACT = "cl100k_base"  # the encoding LiteLLM falls back to


def _litellm() -> Any:
    return import_extra("litellm", package="LiteLLM", extra="litellm",
                        what="contextpolicy.adapters.litellm")


def _messages(messages: Any, path: str) -> list[Any]:
    if not isinstance(messages, (list, tuple)):
        raise ContextPlanError(
            f"expected a list of messages, got {type(messages).__name__}", path=path,
            code="invalid-messages")
    return list(messages)


class ContextPolicyMessages(LastResult):
    """A policy applied to the messages of every ``litellm.completion`` call::

        keep = ContextPolicyMessages(policy)
        response = litellm.completion(model, messages=keep(messages))
        keep.last_report  # what the call's messages were reduced by, measured

    ``policy``: a document, a typed policy or a prepared one, checked once here
    (:class:`~contextpolicy.ContextPolicyError` with every problem); ``counter``: a token
    counter (:func:`litellm_token_counter` counts as LiteLLM does); ``cut="stable"`` (the
    default) keeps a prompt cache's prefix, ``cut="plain"`` runs the policy on each call's whole
    history; ``store``: where a stable cut keeps what it cannot replay (summaries).

    ``tools``: the call's tool schemas (``completion(tools=...)``), counted as the protected
    ``tools`` fragment: the model reads them with every call. Calling it returns the messages
    the policy keeps: the objects given, in their order, for
    every message kept as it was; a handler's dict for one it changed or wrote. The given list
    and its messages are never changed. :meth:`areduce` is the same for async code (coroutine
    handlers). ``last_report``, ``last_result`` and ``last_cut`` hold the latest call's.

    With ``counter=usage_anchored(...)`` (:func:`~contextpolicy.counters.usage_anchored`),
    :meth:`record` keeps the prompt tokens a response reports for the latest call's input, and
    the next call's figures start from them.
    """

    def __init__(self, policy: Any, *, counter: Any = None,
                 handlers: Mapping[str, Callable[..., Any]] | None = None,
                 cut: str = "stable", store: Any = None) -> None:
        checked_cut(cut)
        self.prepared = prepare_agent_policy(policy, handlers, counter)
        self.stable = StableCut(self.prepared, store=store) if cut == "stable" else None
        self.last_result: ContextResult | None = None
        self._usage = anchored_counter(self.prepared)
        # a coroutine handler: calling this (not areduce) is refused
        self._waited = next((hid for hid, h in self.prepared.handlers.items()
                             if is_async_callable(h)), None)

    def record(self, response: Any, result: ContextResult | None = None) -> bool:
        """Record the prompt tokens ``response`` (LiteLLM's ``ModelResponse`` of the call sent
        what this returned) reports as the count of ``result``'s input (the latest call's by
        default), for a usage-anchored counter; whether it was recorded (never without one)."""
        if self._usage is None:
            return False
        return record_usage(self._usage, self.last_result if result is None else result,
                            _prompt_tokens(response))

    @property
    def policy(self) -> PreparedPolicy:
        """The policy as checked once, with its handlers and counter."""
        return self.prepared

    def __call__(self, messages: Sequence[Any], *, tools: Sequence[Any] | None = None,
                 path: str = "messages") -> list[Any]:
        if self._waited is not None:  # this object's own remedy, not the core's
            raise ContextPolicyError(
                f"handler {self._waited!r} is a coroutine function: await this object's "
                "areduce(messages, tools=...) instead of calling it", path="handlers",
                code="async-handler")
        items, back = as_items(_messages(messages, path))
        text = tools_text(tools)
        skip = text is not None
        if self.stable is not None:
            stable = self.stable.process(items, path=path, tools=text)
            self.last_result = stable
            return traced_items(stable, skip, items, back)
        result = process_context(agent_plan(items, path=path, tools=text), self.prepared)
        self.last_result = result
        return kept_items(result, skip, items, back)

    async def areduce(self, messages: Sequence[Any], *, tools: Sequence[Any] | None = None,
                      path: str = "messages") -> list[Any]:
        """:meth:`__call__` for async code: handlers may be coroutine functions."""
        items, back = as_items(_messages(messages, path))
        text = tools_text(tools)
        skip = text is not None
        if self.stable is not None:
            stable = await self.stable.aprocess(items, path=path, tools=text)
            self.last_result = stable
            return traced_items(stable, skip, items, back)
        result = await aprocess_context(agent_plan(items, path=path, tools=text),
                                        self.prepared)
        self.last_result = result
        return kept_items(result, skip, items, back)

    def __repr__(self) -> str:
        return f"ContextPolicyMessages({self.prepared!r})"


def _prompt_tokens(response: Any) -> Any:
    """The prompt tokens a LiteLLM response reports (``response.usage.prompt_tokens``)."""
    usage = getattr(response, "usage", None)
    if usage is None and isinstance(response, Mapping):
        usage = response.get("usage")
    return usage.get("prompt_tokens") if isinstance(usage, Mapping) else getattr(
        usage, "prompt_tokens", None)


def apply_policy(messages: Sequence[Any], policy: Any, *, tools: Sequence[Any] | None = None,
                 counter: Any = None, handlers: Mapping[str, Callable[..., Any]] | None = None,
                 cut: str = "stable", store: Any = None) -> list[Any]:
    """The messages ``policy`` keeps of ``messages``, for one call (see
    :class:`ContextPolicyMessages`, which checks the policy once for many). The stable cut
    gives the same result with or without its memo: called afresh on each call of an agent, it
    still keeps a prompt cache's prefix. It keeps no result: to count from the provider's
    usage, use :class:`ContextPolicyMessages` and its ``record``."""
    return ContextPolicyMessages(policy, counter=counter, handlers=handlers, cut=cut,
                                 store=store)(messages, tools=tools)


# ---------------------------------------------------------------------------------------------
# Tokens as LiteLLM counts them


class LiteLLMCounter:
    """A token counter backed by ``litellm.token_counter`` for ``model``
    (:class:`~contextpolicy.counters.Counter`): ``count_text`` counts a text, ``count_messages``
    a chat with LiteLLM's per-message framing. ``exact`` says whether LiteLLM counts with the
    model's own tokenizer: a Hugging Face tokenizer it has for the model (Llama, Command R), or
    tiktoken's ``cl100k_base`` for a model whose encoding it is (GPT-4, GPT-3.5). For every other
    model LiteLLM counts with ``cl100k_base`` as a stand-in, and ``exact`` is false: Claude 3 and
    later, Gemini, GPT-4o and the o-series among them."""

    def __init__(self, model: str) -> None:
        if type(model) is not str or not model:
            raise ValueError(f"model: expected a model name, got {model!r}")
        litellm = _litellm()
        self.model = model
        self._count = litellm.token_counter
        self.tokenizer, self.exact = _tokenizer_of(litellm, model)
        self.name = f"litellm:{model}"

    def count_text(self, text: str) -> int:
        return checked_count(self._count(model=self.model, text=exact_text(text)),
                             "litellm.token_counter")

    def count_messages(self, messages: list[dict[str, Any]]) -> int:
        return checked_count(self._count(model=self.model, messages=messages),
                             "litellm.token_counter")

    def __repr__(self) -> str:
        return f"LiteLLMCounter({self.model!r}, exact={self.exact})"


def _tokenizer_of(litellm: Any, model: str) -> tuple[str, bool]:
    """What LiteLLM counts ``model``'s tokens with (``huggingface`` or ``tiktoken:<encoding>``),
    and whether that is the model's own tokenizer."""
    from litellm import utils

    select = getattr(utils, "select_tokenizer", None) or utils._select_tokenizer
    chosen = select(model=model)
    if chosen.get("type") == "huggingface_tokenizer":
        return "huggingface", True
    bare = model.rsplit("/", 1)[-1]
    try:
        import tiktoken

        own = tiktoken.encoding_name_for_model(bare)
    except (ImportError, KeyError):
        own = None
    return f"tiktoken:{_TIKTOKEN_EXACT}", own == _TIKTOKEN_EXACT


def litellm_token_counter(model: str) -> LiteLLMCounter:
    """A :class:`LiteLLMCounter` for ``model`` (a LiteLLM model name, ``"gpt-4"``,
    ``"anthropic/claude-sonnet-4-5"``)."""
    return LiteLLMCounter(model)


# ---------------------------------------------------------------------------------------------
# The proxy


def context_policy_hook(policy: Any, *, counter: Any = None,
                        handlers: Mapping[str, Callable[..., Any]] | None = None,
                        cut: str = "stable", store: Any = None,
                        on_report: Callable[[ContextResult, dict[str, Any]], None] | None = None,
                        ) -> Any:
    """A LiteLLM ``CustomLogger`` whose ``async_pre_call_hook`` applies ``policy`` to the
    ``messages`` of every chat completion request a proxy serves (call types ``completion``
    and ``acompletion`` with a ``messages`` list, the request's ``tools`` counted); other
    requests, Anthropic's ``/v1/messages`` and the Responses API among them, pass as they
    came. ``on_report(result, data)`` sees each call's result. In the
    proxy's ``config.yaml``::

        litellm_settings:
          callbacks: my_hooks.policy_hook   # my_hooks.py: policy_hook = context_policy_hook(...)

    The request's data dict is returned as a new dict with the kept messages; the proxy's own
    dict and messages are never changed. A policy error is raised here, when the hook is made.
    With ``counter=usage_anchored(...)``, ``async_post_call_success_hook`` records the prompt
    tokens of each response for the input its request was sent (by ``litellm_call_id``).
    """
    reducer = ContextPolicyMessages(policy, counter=counter, handlers=handlers, cut=cut,
                                    store=store)
    sent = Pending() if reducer._usage is not None else None  # litellm_call_id -> result
    base = import_extra("litellm.integrations.custom_logger", package="LiteLLM",
                        extra="litellm", what="contextpolicy.adapters.litellm").CustomLogger

    class ContextPolicyHook(base):  # type: ignore[misc,valid-type]
        """Applies a context policy to every chat request of a LiteLLM proxy."""

        def __init__(self) -> None:
            super().__init__()
            self.messages = reducer

        @property
        def last_result(self) -> ContextResult | None:
            return reducer.last_result

        @property
        def last_report(self) -> ContextReport | None:
            return reducer.last_report

        @property
        def last_cut(self) -> CutReport | None:
            return reducer.last_cut

        async def async_pre_call_hook(self, user_api_key_dict: Any, cache: Any,
                                      data: dict[str, Any], call_type: Any) -> Any:
            messages = data.get("messages") if isinstance(data, dict) else None
            if call_type not in CHAT_CALL_TYPES or not isinstance(messages, list):
                return data
            tools = data.get("tools")
            kept = await reducer.areduce(
                messages, tools=tools if isinstance(tools, list) else None, path="messages")
            if on_report is not None and reducer.last_result is not None:
                on_report(reducer.last_result, data)
            if sent is not None and data.get("litellm_call_id") is not None:
                sent.put(data["litellm_call_id"], reducer.last_result)
            return {**data, "messages": kept}

        async def async_post_call_success_hook(self, data: dict[str, Any],
                                               user_api_key_dict: Any, response: Any) -> Any:
            if sent is not None and isinstance(data, dict):
                result = sent.pop(data.get("litellm_call_id"))
                if result is not None:
                    reducer.record(response, result)
            return None  # the response as it is

    return ContextPolicyHook()
