"""What a shard's snapshot says about its state: a consuming shard whose lease has expired is
shown as `lease_expired`, with why; every other state is shown as it is."""

from __future__ import annotations

import pytest

from loghubd.consumer.snapshot import shown_state


@pytest.mark.parametrize(
    ("state", "lease_valid", "held_since", "shown", "reason_has"),
    [
        ("consuming", True, None, "consuming", "was"),
        ("consuming", True, 5.0, "consuming", "was"),
        ("consuming", False, None, "lease_expired", "no batch is processed"),
        ("consuming", False, 90.0, "lease_expired", "held unprocessed for 10s"),
        ("consuming", False, 200.0, "lease_expired", "held unprocessed for 0s"),  # clock skew
        ("starting", False, None, "starting", "was"),
        ("finished", False, None, "finished", "was"),
        ("failed", False, None, "failed", "was"),
        ("stopping", False, None, "stopping", "was"),
    ],
)
def test_shown_state(
    state: str, lease_valid: bool, held_since: float | None, shown: str, reason_has: str
) -> None:
    got, reason = shown_state(state, "was", lease_valid, held_since, 100.0)
    assert got == shown
    assert reason_has in reason
    if shown == "lease_expired":
        assert reason.startswith("lease expired: no heartbeat answered")
    else:
        assert reason == "was"  # shown as it is
