"""A fake of nvidia-ml-py's ``pynvml`` module for rlvr's GPU tests (no GPU, no driver needed).

Put this directory first on PYTHONPATH (or pass the module as ``NvmlReader(nvml=...)``) and
describe the node in a JSON scenario named by FAKE_GPU_SCENARIO (or given to ``load``):

    {"nvml": "ok" | "missing" | "not_loaded",
     "gpus": [{"uuid": "GPU-...", "name": "NVIDIA A100-SXM4-80GB", "total_mib": 81920}, ...],
     "samples": [[{"used_mib": 4, "util": 0, "procs": [[pid, mib], ...],
                   "error": "gpu_lost" | "util_not_supported"}, ...one per GPU], ...]}

Every (function, GPU) pair keeps its own call counter: the k-th memory (utilisation,
process) reading of a GPU returns sample k, and the last sample repeats. So a window of
readings walks through the samples whatever order the caller reads GPUs in. Names, error
classes and returned structures follow the real module (bytes -> str, memory in bytes,
``usedGpuMemory`` None when not available).
"""

import json
import os

NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_GPU_IS_LOST = 15
nvmlMemory_v2 = 0x02000028

_MESSAGES = {
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
}


class NVMLError(Exception):
    def __new__(cls, value):
        sub = _CLASSES.get(value, cls) if cls is NVMLError else cls
        obj = Exception.__new__(sub)
        obj.value = value
        return obj

    def __init__(self, value):
        self.value = value

    def __str__(self):
        return _MESSAGES.get(self.value, f"Unknown Error {self.value}")


class NVMLError_NotSupported(NVMLError):
    pass


class NVMLError_DriverNotLoaded(NVMLError):
    pass


class NVMLError_LibraryNotFound(NVMLError):
    pass


class NVMLError_GpuIsLost(NVMLError):
    pass


_CLASSES = {
    NVML_ERROR_NOT_SUPPORTED: NVMLError_NotSupported,
    NVML_ERROR_DRIVER_NOT_LOADED: NVMLError_DriverNotLoaded,
    NVML_ERROR_LIBRARY_NOT_FOUND: NVMLError_LibraryNotFound,
    NVML_ERROR_GPU_IS_LOST: NVMLError_GpuIsLost,
}

_scenario = None
_calls = {}
_init = 0


class _Struct:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def load(scenario):
    """Use this scenario (a dict) and reset the call counters."""
    global _scenario
    _scenario = scenario
    _calls.clear()


def _scn():
    if _scenario is None:
        path = os.environ.get("FAKE_GPU_SCENARIO")
        if not path:
            raise NVMLError(NVML_ERROR_LIBRARY_NOT_FOUND)
        with open(path) as fh:
            load(json.load(fh))
    return _scenario


def _check():
    if not _init:
        raise NVMLError(999)  # the real module says "Uninitialized"


def _sample(fn, handle):
    _check()
    key = (fn, handle.index)
    k = _calls.get(key, 0)
    _calls[key] = k + 1
    samples = _scn()["samples"]
    g = samples[min(k, len(samples) - 1)][handle.index]
    if g.get("error") == "gpu_lost":
        raise NVMLError(NVML_ERROR_GPU_IS_LOST)
    return g


def nvmlInit():
    global _init
    state = _scn().get("nvml", "ok")
    if state == "missing":
        raise NVMLError(NVML_ERROR_LIBRARY_NOT_FOUND)
    if state == "not_loaded":
        raise NVMLError(NVML_ERROR_DRIVER_NOT_LOADED)
    _init += 1


def nvmlShutdown():
    global _init
    _init = max(0, _init - 1)


def nvmlDeviceGetCount():
    _check()
    return len(_scn()["gpus"])


def nvmlDeviceGetHandleByIndex(index):
    _check()
    if not 0 <= index < len(_scn()["gpus"]):
        raise NVMLError(2)
    return _Struct(index=index)


def nvmlDeviceGetUUID(handle):
    _check()
    return _scn()["gpus"][handle.index]["uuid"]


def nvmlDeviceGetName(handle):
    _check()
    return _scn()["gpus"][handle.index]["name"]


def nvmlDeviceGetMemoryInfo(handle, version=None):
    g = _sample("mem", handle)
    total = _scn()["gpus"][handle.index]["total_mib"] << 20
    used = int(g["used_mib"] * (1 << 20))
    kw = {"version": version, "reserved": 0} if version else {}
    return _Struct(total=total, used=used, free=total - used, **kw)


def nvmlDeviceGetUtilizationRates(handle):
    g = _sample("util", handle)
    if g.get("error") == "util_not_supported" or g.get("util") is None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return _Struct(gpu=g["util"], memory=min(100, g["util"] // 2))


def nvmlDeviceGetComputeRunningProcesses(handle):
    g = _sample("procs", handle)
    return [_Struct(pid=pid, usedGpuMemory=None if mib is None else int(mib * (1 << 20)),
                    gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF) for pid, mib in g.get("procs", [])]


def nvmlDeviceGetGraphicsRunningProcesses(handle):
    _check()
    return []
