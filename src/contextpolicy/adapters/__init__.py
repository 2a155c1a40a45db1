"""The adapters layer: a context policy inside the frameworks agents run in.

- :mod:`contextpolicy.adapters.langchain` (extra ``[langchain]``): ``ContextPolicyMiddleware``
  for LangChain v1 ``create_agent``, ``context_policy_node`` for LangGraph, and
  ``langchain_token_counter``, which lends our counters to LangChain's own middleware.
- :mod:`contextpolicy.adapters.openai_agents` (extra ``[openai-agents]``):
  ``context_policy_input_filter`` for the OpenAI Agents SDK's ``call_model_input_filter``, and
  ``ContextPolicySession``, which reduces what a session hands the runner.

Every adapter splits an agent's input into the same fragments (``_agent``), so one policy file
works in all of them. Each module imports its framework only when it is imported itself.
"""

__all__: list[str] = []
