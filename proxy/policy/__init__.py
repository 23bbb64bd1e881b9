"""Team policies: schema, loading with FILE:LINE errors, the store that hot-reloads."""

from proxy.policy.load import PolicyError, load_policy_dir
from proxy.policy.model import (
    DEFAULT_SECTIONS,
    ModelPolicy,
    Policy,
    QuotaPolicy,
    SectionPolicy,
    SummaryPolicy,
    ThresholdPolicy,
)
from proxy.policy.policy_set import PolicySet
from proxy.policy.store import PolicyStore

__all__ = [
    "DEFAULT_SECTIONS",
    "ModelPolicy",
    "Policy",
    "PolicyError",
    "PolicySet",
    "PolicyStore",
    "QuotaPolicy",
    "SectionPolicy",
    "SummaryPolicy",
    "ThresholdPolicy",
    "load_policy_dir",
]
