"""``contextpolicy schema``: the JSON Schema of a policy, a plan or a report."""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["cmd_schema", "json_schema"]

def cmd_schema(args: argparse.Namespace) -> int:
    import orjson

    schema = json_schema(args.what)
    sys.stdout.buffer.write(orjson.dumps(schema, option=orjson.OPT_INDENT_2) + b"\n")
    return 0


def json_schema(what: str) -> dict[str, Any]:
    """The JSON Schema of a policy, a plan or a report (camelCase keys)."""
    from pydantic import TypeAdapter

    from ..plan import ContextPlan
    from ..policy import ContextPolicy
    from ..report import ContextReport

    if what == "policy":
        schema = TypeAdapter(ContextPolicy).json_schema(by_alias=True)
        schema["title"] = "ContextPolicy"
    elif what == "plan":
        schema = ContextPlan.model_json_schema(by_alias=True)
    else:
        schema = ContextReport.model_json_schema(by_alias=True, mode="serialization")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema
