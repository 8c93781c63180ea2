"""The deadline heap behind session and rebalance timeouts."""

from minikafka.broker.groups.timers import TimerQueue


def test_fires_due_timers_in_deadline_order_and_skips_cancelled():
    fired = []
    queue = TimerQueue()
    queue.schedule(30, lambda: fired.append("c"))
    queue.schedule(10, lambda: fired.append("a"))
    cancelled = queue.schedule(20, lambda: fired.append("x"))
    queue.schedule(20, lambda: fired.append("b"))
    cancelled.cancel()
    assert queue.next_deadline() == 10
    assert queue.run_due(25) == 2
    assert fired == ["a", "b"] and queue.next_deadline() == 30 and len(queue) == 1


def test_earlier_deadline_wakes_the_driver_and_callbacks_may_rearm():
    wakeups = []
    queue = TimerQueue(on_earlier_deadline=lambda: wakeups.append(1))
    queue.schedule(100, lambda: None)
    queue.schedule(200, lambda: None)
    queue.schedule(50, lambda: queue.schedule(60, lambda: wakeups.append("rearmed")))
    assert wakeups == [1, 1]
    queue.run_due(70)
    assert "rearmed" in wakeups


def test_a_failing_callback_does_not_stop_the_others():
    fired = []
    queue = TimerQueue()
    queue.schedule(1, lambda: 1 / 0)
    queue.schedule(2, lambda: fired.append(2))
    assert queue.run_due(5) == 2 and fired == [2]
