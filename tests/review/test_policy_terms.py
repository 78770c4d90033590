"""The keys of rules 13-16 as a policy reads them (SPEC §5.1): random values are refused or
read exactly, never as something broader; a review's terms are what its policy said."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from handrail.errors import ConfigurationError
from handrail.review import Policies, parse_policy, terms_for, terms_of
from handrail.review.terms import MAX_APPROVALS, MAX_EXPIRY

VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, MAX_APPROVALS + 3),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
    st.sampled_from(["reject", "approve", "false", "true", "0", "1h"]),
    st.timedeltas(min_value=timedelta(seconds=-10), max_value=timedelta(days=400)),
)
KEYS = ("allow_self_approval", "required_approvals", "expires_after", "on_expiry", "grantable")


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.sampled_from(KEYS), VALUES))
def test_random_rule_keys_are_refused_or_read_exactly(raw: dict[str, Any]) -> None:
    config = {"allowed_decisions": ["approve", "reject"], **raw}
    try:
        policy = parse_policy("execute_sql", config)
    except ConfigurationError:
        return
    assert policy is not None
    assert policy.allow_self_approval is raw.get("allow_self_approval", True)
    assert policy.grantable is raw.get("grantable", True)
    approvals = raw.get("required_approvals", 1)
    assert (
        policy.required_approvals == approvals and type(approvals) is int and 1 <= approvals <= MAX_APPROVALS
    )
    if "expires_after" in raw:
        given_after = raw["expires_after"]
        seconds = given_after.total_seconds() if isinstance(given_after, timedelta) else given_after
        assert policy.expires_after == float(seconds) and 0 < seconds <= MAX_EXPIRY and math.isfinite(seconds)
    else:
        assert policy.expires_after is None and "on_expiry" not in raw
    assert policy.on_expiry == raw.get("on_expiry", "reject")
    # what a review of a call under this policy keeps is exactly what the policy says
    gate = Policies({"execute_sql": policy})
    value = {"type": "tool_approval", "tool_call_id": "c1", "name": "execute_sql", "args": {}}
    terms = terms_for(gate, value)
    kept = terms_of(terms, "c1")
    assert (kept.approvals, kept.self_approval, kept.grantable) == (
        policy.required_approvals,
        policy.allow_self_approval,
        policy.grantable,
    )
    assert kept.on_expiry == policy.on_expiry
    assert (terms or {}).get("expires_after") == policy.expires_after
