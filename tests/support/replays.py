"""Agent sessions and the persisted reduction a stable cut must equal: the policy run before
every model call of a session, its result kept as the next call's history."""

from __future__ import annotations

import json
import random
from importlib import resources
from typing import Any

from contextpolicy import process_context
from contextpolicy.adapters._agent import agent_plan


def shipped_agent_policy() -> tuple[dict[str, Any], dict[str, Any]]:
    """The shipped agent policy (``policy-agent.json``) and its handlers, registered from
    ``handlers-agent.json``."""
    from contextpolicy.handlers import from_config

    examples = resources.files("contextpolicy").joinpath("examples")
    policy = json.loads(examples.joinpath("policy-agent.json").read_text("utf-8"))
    handlers = from_config(json.loads(examples.joinpath("handlers-agent.json").read_text("utf-8")))
    return policy, handlers


def is_model_output(message: Any) -> bool:
    if not isinstance(message, dict):
        return False
    if message.get("role") == "assistant":
        return True
    return message.get("type") in ("function_call", "reasoning") and "role" not in message


def call_points(messages: list[Any]) -> list[int]:
    """Where each model call's output starts (the first of a run of model outputs, not 0)."""
    return [i for i in range(1, len(messages))
            if is_model_output(messages[i]) and not is_model_output(messages[i - 1])]


def persisted(messages: list[Any], prepared: Any, lead: list[Any] | None = None,
              instructions: str | None = None, question: bool = True,
              tools: str | None = None) -> list[Any]:
    """The input of the call whose history is ``messages``, as an agent that kept every
    reduction (persist) would send it: the policy run at each earlier call and at this one."""
    lead = lead or []
    skip = len(lead) + (instructions is not None) + (tools is not None)
    state: list[Any] = []
    done = 0
    result = None
    for p in [*call_points(messages), len(messages)]:
        given = state + messages[done:p]
        result = process_context(agent_plan(given, lead=lead, instructions=instructions,
                                            question=question, tools=tools), prepared)
        state, done = result.input[skip:], p
    assert result is not None
    return result.input


def tool_session(turns: int, seed: int = 0, result_chars: tuple[int, int] = (2_500, 3_500),
                 ) -> list[dict[str, Any]]:
    """An agent session: each turn a question, a tool call, its result, an answer."""
    rnd = random.Random(seed)
    out: list[dict[str, Any]] = []
    for t in range(turns):
        out += [
            {"role": "user", "content": f"question {t} " + "q" * rnd.randint(50, 300)},
            {"role": "assistant", "content": "", "tool_calls": [{
                "id": f"c{t}", "type": "function",
                "function": {"name": "search", "arguments": f'{{"q": "{t}"}}'}}]},
            {"role": "tool", "tool_call_id": f"c{t}",
             "content": f"result {t} " + "r" * rnd.randint(*result_chars)},
            {"role": "assistant", "content": f"answer {t} " + "a" * rnd.randint(100, 600)},
        ]
    return out
