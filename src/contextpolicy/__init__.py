"""contextpolicy: decide what an LLM agent may send to its model.

Validate a plan of named fragments (system instructions, the question, evidence, history, ...)
against a policy, reduce it when it grows past a watermark, and audit what the application
changed, without ever rewriting protected fragments and without guessing token counts.

The public names load on first use, so that ``import contextpolicy.cli`` (and so
``contextpolicy --help``) costs neither numpy nor the kernel.
"""

from __future__ import annotations

from ._lazy import lazy_exports

# typing.TYPE_CHECKING without importing typing, which ``contextpolicy --help`` never needs.
TYPE_CHECKING = False

__version__ = "0.1.0"

# Public name -> the module that defines it.
_EXPORTS: dict[str, str] = {
    "kernel_info": "._kernel",
    "TokenCounter": ".accounting",
    **dict.fromkeys(
        ("aprocess_context", "astream_context", "check_input_budget", "enforce_contract",
         "process_context"),
        ".core",
    ),
    **dict.fromkeys(
        ("ContextAuditError", "ContextCancelledError", "ContextContractError", "ContextError",
         "ContextPlanError", "ContextPolicyError", "ContextStepError", "InputBudgetError",
         "Issue"),
        ".errors",
    ),
    **dict.fromkeys(("PROTECTED_KINDS", "REDUCIBLE_KINDS", "ContextPlan", "Fragment"), ".plan"),
    **dict.fromkeys(("PreparedPolicy", "prepare_policy"), ".prepared"),
    **dict.fromkeys(
        ("AuditPolicy", "CompressStep", "ContextPolicy", "Grouping", "ReducePolicy", "Selection",
         "TrimStep", "ValidatePolicy", "validate_context_policy"),
        ".policy",
    ),
    **dict.fromkeys(
        ("AuditChange", "AuditReport", "CompressFigures", "ContextEvent", "ContextReport",
         "ContextResult", "FragmentUsage", "PlanWarning", "StepReport", "Usage", "Watermark"),
        ".report",
    ),
    **dict.fromkeys(("CompressRequest", "PolicyContext", "PolicyOutcome"), ".implementations"),
    **dict.fromkeys(("CutReport", "StableCut", "StableResult"), ".stable"),
    "MemoryStore": ".stores",
}

__all__ = [
    "AuditChange",
    "AuditPolicy",
    "AuditReport",
    "CompressFigures",
    "CompressRequest",
    "CompressStep",
    "ContextAuditError",
    "ContextCancelledError",
    "ContextContractError",
    "ContextError",
    "ContextEvent",
    "ContextPlan",
    "ContextPlanError",
    "ContextPolicy",
    "ContextPolicyError",
    "ContextReport",
    "ContextResult",
    "ContextStepError",
    "CutReport",
    "Fragment",
    "FragmentUsage",
    "Grouping",
    "InputBudgetError",
    "Issue",
    "MemoryStore",
    "PROTECTED_KINDS",
    "PlanWarning",
    "PolicyContext",
    "PolicyOutcome",
    "PreparedPolicy",
    "REDUCIBLE_KINDS",
    "ReducePolicy",
    "Selection",
    "StableCut",
    "StableResult",
    "StepReport",
    "TokenCounter",
    "TrimStep",
    "Usage",
    "ValidatePolicy",
    "Watermark",
    "aprocess_context",
    "astream_context",
    "check_input_budget",
    "enforce_contract",
    "kernel_info",
    "prepare_policy",
    "process_context",
    "validate_context_policy",
]


__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)


if TYPE_CHECKING:
    from ._kernel import kernel_info
    from .accounting import TokenCounter
    from .core import (
        aprocess_context,
        astream_context,
        check_input_budget,
        enforce_contract,
        process_context,
    )
    from .errors import (
        ContextAuditError,
        ContextCancelledError,
        ContextContractError,
        ContextError,
        ContextPlanError,
        ContextPolicyError,
        ContextStepError,
        InputBudgetError,
        Issue,
    )
    from .implementations import CompressRequest, PolicyContext, PolicyOutcome
    from .plan import PROTECTED_KINDS, REDUCIBLE_KINDS, ContextPlan, Fragment
    from .policy import (
        AuditPolicy,
        CompressStep,
        ContextPolicy,
        Grouping,
        ReducePolicy,
        Selection,
        TrimStep,
        ValidatePolicy,
        validate_context_policy,
    )
    from .prepared import PreparedPolicy, prepare_policy
    from .report import (
        AuditChange,
        AuditReport,
        CompressFigures,
        ContextEvent,
        ContextReport,
        ContextResult,
        FragmentUsage,
        PlanWarning,
        StepReport,
        Usage,
        Watermark,
    )
    from .stable import CutReport, StableCut, StableResult
    from .stores import MemoryStore
