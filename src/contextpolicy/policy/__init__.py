"""The policy layer: the typed policy models and every rule a policy must keep.

``models`` holds the pydantic models (a typed policy is always valid: the cross-field rules are
model validators), ``rules`` the rules themselves, shared by those validators and by the
collect-all-issues pass of ``validation``, which turns a policy document into a typed policy and
reports every problem at once, and ``watermark`` says when a reduce policy triggers and when its
targets are met.
"""

from .models import (
    AuditPolicy,
    CompressStep,
    ContextPolicy,
    Grouping,
    ReducePolicy,
    Selection,
    Step,
    TrimStep,
    ValidatePolicy,
)
from .validation import TypedPolicy, validate_context_policy

__all__ = [
    "AuditPolicy",
    "CompressStep",
    "ContextPolicy",
    "Grouping",
    "ReducePolicy",
    "Selection",
    "Step",
    "TrimStep",
    "TypedPolicy",
    "ValidatePolicy",
    "validate_context_policy",
]
