"""The `--workers` supervisor's sd_notify relay (pure): READY once all are ready, stuck
workers found from their watchdog pings."""

from __future__ import annotations

from loghubd.ops.relay import Relay


def test_ready_once_when_every_child_is_ready_and_not_again_after_a_restart() -> None:
    relay = Relay(["a", "b"], watchdog_s=2.0)
    relay.started("a", 0.0)
    relay.started("b", 0.0)
    relay.heard("a", "READY=1\nSTATUS=x", 1.0)
    assert (relay.ready_count(), relay.take_ready()) == (1, False)
    relay.heard("b", "WATCHDOG=1", 1.0)  # a ping is not readiness
    assert not relay.take_ready()
    relay.heard("b", "READY=1", 1.5)
    assert relay.take_ready()
    assert not relay.take_ready()  # once
    relay.started("a", 2.0)  # restarted: not ready again, and no second READY=1
    assert relay.ready_count() == 1
    relay.heard("a", "READY=1", 3.0)
    assert not relay.take_ready()


def test_a_ready_child_without_pings_for_a_watchdog_period_is_stuck() -> None:
    relay = Relay(["a", "b", "c"], watchdog_s=2.0)
    for name in "abc":
        relay.started(name, 0.0)
    relay.heard("a", "READY=1", 1.0)
    relay.heard("b", "READY=1", 1.0)
    # c never said READY=1: still starting, never stuck
    relay.heard("a", "WATCHDOG=1", 2.5)
    assert relay.stuck(3.5) == ["b"]
    relay.heard("b", "WATCHDOG=1", 3.6)
    assert relay.stuck(4.0) == []
    assert relay.stuck(10.0) == ["a", "b"]
    assert Relay(["a"], watchdog_s=0.0).stuck(100.0) == []  # no watchdog configured


def test_a_reloading_child_is_starting_again_not_stuck() -> None:
    relay = Relay(["a", "b"], watchdog_s=2.0)
    for name in "ab":
        relay.started(name, 0.0)
        relay.heard(name, "READY=1", 1.0)
    assert relay.take_ready()
    relay.heard("a", "RELOADING=1\nMONOTONIC_USEC=123", 1.5)  # its pings stop meanwhile
    relay.heard("b", "WATCHDOG=1", 4.0)
    assert relay.stuck(4.0) == [] and relay.ready_count() == 1
    relay.heard("a", "READY=1", 5.0)
    assert relay.ready_count() == 2 and not relay.take_ready()  # READY=1 went out once
    assert relay.stuck(7.5) == ["a", "b"]  # ready again: watched again
