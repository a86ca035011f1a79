"""A signal whose handler raises, arriving while rlvr-train's driver waits inside Ray, ends the
run with that exception and records it (rlvr.train.ray_calls), end to end on the tiny model.
(Split from tests/test_train_faults.py so the two files run side by side.)"""

from __future__ import annotations

import threading
import time

import orjson
import pytest

from test_train import SMALL, base_model, cfg_for, ray_session, run, trace  # noqa: F401 - fixtures
from test_train_faults import first_step_done


class StopRun(Exception):
    pass


@pytest.mark.parametrize("exc, status", [(KeyboardInterrupt, "interrupted"), (StopRun, "failed")])
def test_a_signal_handlers_exception_ends_the_run_as_itself(ray_session, base_model, tmp_path, monkeypatch,
                                                            exc, status):
    """A signal whose handler raises (rlvr's SIGTERM handler raises KeyboardInterrupt; a user's
    alarm its own error) while the driver waits in Ray ends the run with that exception and
    records it, never as Ray's bare SystemError that an engine-fault handler could take for a
    failed engine (rlvr.train.ray_calls). The signal is sent while the driver is inside Ray's
    wait: the first wait after step 1 first waits 2 s on a task that never ends."""
    import signal

    import ray

    cfg = cfg_for(base_model, "train.steps=50", "checkpoint.every=0", *SMALL)

    def handler(signum, frame):
        raise exc("stop")

    @ray.remote(num_cpus=0)
    def never():
        time.sleep(3600)

    real_wait, main, sent = ray.wait, threading.main_thread().ident, []

    def wait(refs, **kwargs):
        if not sent and threading.get_ident() == main and first_step_done(tmp_path):
            sent.append(True)
            threading.Timer(0.2, signal.pthread_kill, (main, signal.SIGUSR1)).start()
            real_wait([never.remote()], timeout=2.0)   # inside Ray's C++ wait when the signal comes
        return real_wait(refs, **kwargs)

    old = signal.signal(signal.SIGUSR1, handler)
    monkeypatch.setattr(ray, "wait", wait)
    try:
        with pytest.raises(exc):
            run(cfg, tmp_path)
    finally:
        signal.signal(signal.SIGUSR1, old)
    assert sent
    manifest = orjson.loads((tmp_path / "run.json").read_bytes())
    assert manifest["status"] == status
    assert len(trace(tmp_path)) < 50
