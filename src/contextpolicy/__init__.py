"""contextpolicy: decide what an LLM agent may send to its model.

Validate a plan of named fragments (system instructions, the question, evidence, history, ...)
against a policy, reduce it when it grows past a watermark, and audit what the application
changed, without ever rewriting protected fragments and without guessing token counts.
"""

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
from .report import (
    AuditChange,
    AuditReport,
    ContextEvent,
    ContextReport,
    ContextResult,
    FragmentUsage,
    PlanWarning,
    StepReport,
    Usage,
    Watermark,
)
from .support import CompressRequest, PolicyContext, PolicyOutcome

__version__ = "0.1.0"

__all__ = [
    "PROTECTED_KINDS",
    "REDUCIBLE_KINDS",
    "AuditChange",
    "AuditPolicy",
    "AuditReport",
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
    "Fragment",
    "FragmentUsage",
    "Grouping",
    "InputBudgetError",
    "Issue",
    "PlanWarning",
    "PolicyContext",
    "PolicyOutcome",
    "ReducePolicy",
    "Selection",
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
    "process_context",
    "validate_context_policy",
]
