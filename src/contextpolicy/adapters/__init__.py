"""The adapters layer: a context policy inside the frameworks agents run in.

- :mod:`contextpolicy.adapters.langchain` (extra ``[langchain]``): ``ContextPolicyMiddleware``
  for LangChain v1 ``create_agent``, ``context_policy_node`` for LangGraph, and
  ``langchain_token_counter``, which lends our counters to LangChain's own middleware.
- :mod:`contextpolicy.adapters.openai_agents` (extra ``[openai-agents]``):
  ``context_policy_input_filter`` for the OpenAI Agents SDK's ``call_model_input_filter``, and
  ``ContextPolicySession``, which reduces what a session hands the runner.
- :mod:`contextpolicy.adapters.litellm` (extra ``[litellm]``): ``apply_policy`` and
  ``ContextPolicyMessages`` before ``completion``, ``litellm_token_counter``, and
  ``context_policy_hook`` for a LiteLLM proxy.
- :mod:`contextpolicy.adapters.google_adk` (extra ``[google-adk]``):
  ``context_policy_callback``, an ``LlmAgent``'s ``before_model_callback``.
- :mod:`contextpolicy.adapters.pydantic_ai` (extra ``[pydantic-ai]``):
  ``ContextPolicyProcessor`` (a history processor: persist) and ``ContextPolicyCapability``
  (ephemeral).

Every adapter splits an agent's input into the same fragments (``_agent``), so one policy file
works in all of them. Each module imports its framework only when it is imported itself
(LiteLLM's and ADK's: when first used).
"""

__all__: list[str] = []
