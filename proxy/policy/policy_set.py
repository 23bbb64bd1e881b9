"""Every team's policy as one set: which key belongs to which team, admin keys, who
reads /metrics; built once per load (a reload builds a new one)."""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field

from proxy.policy.model import Policy, hash_key


@dataclass(frozen=True, slots=True)
class PolicySet:
    """Every team's policy; `default` applies in open mode and to unknown teams."""

    default: Policy
    policies: tuple[Policy, ...] = ()
    # Key mode with no key left (every key revoked while the server runs): nobody is
    # admitted. A running server never switches itself to open mode (store.py).
    closed: bool = False
    # Derived once here: every request asks (auth, forwarded headers), and a set never
    # changes (a reload builds a new one).
    open_mode: bool = field(init=False, repr=False, compare=False)
    admin_required: bool = field(init=False, repr=False, compare=False)
    metrics_public: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        every = self.all()
        open_mode = not self.closed and not any(p.keys for p in every)
        object.__setattr__(self, "open_mode", open_mode)
        object.__setattr__(self, "admin_required", any(p.admin_keys for p in every))
        object.__setattr__(self, "metrics_public", any(p.metrics == "public" for p in every))

    def all(self) -> tuple[Policy, ...]:
        return (self.default, *self.policies)

    def by_team(self, team: str) -> Policy:
        for policy in self.all():
            if policy.team == team:
                return policy
        return self.default

    def for_key(self, presented: str | None) -> Policy | None:
        """The policy whose keys hold `presented`, compared in constant time; None if none."""
        if presented is None:
            return None
        digest = hash_key(presented)
        found: Policy | None = None
        # Compare against every stored hash so timing does not reveal which team matched.
        for policy in self.all():
            for stored in policy.keys:
                if hmac.compare_digest(digest.encode(), stored.lower().encode()):
                    found = found or policy
        return found

    def is_admin(self, presented: str | None) -> bool:
        if presented is None:
            return False
        digest = hash_key(presented).encode()
        matched = False
        for policy in self.all():
            for stored in policy.admin_keys:
                matched |= hmac.compare_digest(digest, stored.lower().encode())
        return matched
