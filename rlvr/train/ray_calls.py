"""ray.get and ray.wait for rlvr-train's driver, with interruptions surfacing as themselves.

While Ray's C++ core waits it runs the interpreter's signal handlers; an exception a handler
raises there (KeyboardInterrupt from SIGINT, a test runner's or a user's SIGALRM timeout)
comes back from Ray 2.60 as a bare ``SystemError: <cyfunction CoreWorker.wait> returned a
result with an exception set``, the real exception only as its ``__cause__``. A SystemError
is an ``Exception``, so the driver's handlers for a failed engine call would take a Ctrl-C for
an engine fault and restart the engine. These two functions re-raise the handler's exception
instead, so an interrupted run ends as interrupted (run.json ``status: interrupted``) and a
timeout as that timeout:

    from rlvr.train import ray_calls
    ready, late = ray_calls.wait(refs, num_returns=len(refs), timeout=30)
    out = ray_calls.get(refs)
"""

from __future__ import annotations

from typing import Any


def unwrap(ex: SystemError) -> BaseException | None:
    """The exception a signal handler raised inside Ray's C code, which `ex` hides; None for a
    SystemError of another kind."""
    cause = ex.__cause__ or ex.__context__
    if cause is None or isinstance(cause, SystemError) or "returned a result with an exception set" not in str(ex):
        return None
    return cause


def _call(fn, *args, **kwargs) -> Any:
    try:
        return fn(*args, **kwargs)
    except SystemError as ex:
        cause = unwrap(ex)
        if cause is None:
            raise
        raise cause.with_traceback(cause.__traceback__) from None


def get(refs, **kwargs) -> Any:
    """ray.get(refs, **kwargs); an exception raised by a signal handler meanwhile is raised as itself."""
    import ray

    return _call(ray.get, refs, **kwargs)


def wait(refs, **kwargs) -> tuple[list, list]:
    """ray.wait(refs, **kwargs); an exception raised by a signal handler meanwhile is raised as itself."""
    import ray

    return _call(ray.wait, refs, **kwargs)
