"""rlvr.train.ray_calls: an exception that a signal handler raises while Ray's C++ core waits
(Ctrl-C, a timeout's SIGALRM) surfaces as itself, not as Ray's bare SystemError, so a
driver's `except Exception` for a failed engine call never takes an interruption for a fault."""

from __future__ import annotations

import signal
import time

import pytest


@pytest.fixture(scope="module")
def ray_one_cpu():
    import ray

    ray.init(address="local", num_cpus=1, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    yield ray
    ray.shutdown()


class Alarm(Exception):
    pass


@pytest.fixture
def alarm_in_half_a_second():
    """SIGALRM half a second from now raises KeyboardInterrupt or Alarm, as chosen."""
    raised = {}

    def arm(exc: BaseException):
        def handler(signum, frame):
            raised["at"] = time.monotonic()
            raise exc

        signal.signal(signal.SIGALRM, handler)
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        return raised

    old = signal.getsignal(signal.SIGALRM)
    yield arm
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("call", ["wait", "get"])
@pytest.mark.parametrize("exc", [KeyboardInterrupt, Alarm])
def test_an_exception_raised_by_a_signal_handler_during_a_ray_call_is_raised_as_itself(
        ray_one_cpu, alarm_in_half_a_second, call, exc):
    from rlvr.train import ray_calls

    ray = ray_one_cpu

    @ray.remote(num_cpus=0)
    def slow():
        time.sleep(3)   # Ray raises the handler's exception once the wait ends (KeyboardInterrupt: at once)

    ref = slow.remote()
    raised = alarm_in_half_a_second(exc("interrupted"))
    with pytest.raises(exc):   # (Ray raises a KeyboardInterrupt of its own, without the message)
        if call == "wait":
            ray_calls.wait([ref], timeout=120)
        else:
            ray_calls.get(ref, timeout=120)
    assert "at" in raised   # the handler ran inside the call


def test_other_errors_pass_through(ray_one_cpu):
    from rlvr.train import ray_calls

    ray = ray_one_cpu

    @ray.remote(num_cpus=0)
    def fails():
        raise ValueError("bad input")

    with pytest.raises(ray.exceptions.RayTaskError, match="bad input"):
        ray_calls.get(fails.remote())
    ready, late = ray_calls.wait([fails.remote()], timeout=120)
    assert ready and not late
    plain = SystemError("something else")
    assert ray_calls.unwrap(plain) is None
