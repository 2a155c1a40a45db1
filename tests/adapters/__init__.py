"""The agent framework adapters: LangChain and LangGraph, the OpenAI Agents SDK."""
