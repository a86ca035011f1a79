"""What every part of rlvr.gpu shares: rlvr-gpu-free's exit codes, sampling defaults, errors."""

from __future__ import annotations

from rlvr.errors import Failure

# Exit codes of rlvr-gpu-free, beside rlvr.errors' shared 0/1/2/3/130.
EXIT_TOO_FEW = 4
EXIT_NO_GPU = 5

DEFAULT_SAMPLES = 5
DEFAULT_INTERVAL = 0.5
DEFAULT_MAX_MEM_MIB = 1024
MIB = 1 << 20


class GpuError(Failure, RuntimeError):
    """GPU state could not be read (e.g. nvidia-smi printed something unparsable): exit 1."""


class NoGpuError(GpuError):
    """No NVIDIA driver, no GPU, or CUDA_VISIBLE_DEVICES hides every GPU: exit 5."""

    exit_code = EXIT_NO_GPU


class TooFewFree(GpuError):
    """Fewer free GPUs than asked for (exit 4); ``states`` holds what was seen."""

    exit_code = EXIT_TOO_FEW

    def __init__(self, message: str, states: list, want: int):
        super().__init__(message)
        self.states = states
        self.want = want
