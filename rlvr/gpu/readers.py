"""Reading the driver: one ``Reading`` per GPU from NVML (nvidia-ml-py) or nvidia-smi, and
which GPUs CUDA_VISIBLE_DEVICES exposes."""

from __future__ import annotations

import csv
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rlvr.gpu.common import MIB, GpuError, NoGpuError


class _Unavailable(Exception):
    """A reader cannot start (no library, no driver, no binary): try the next one."""


@dataclass
class Reading:
    """One GPU at one instant, as the driver reports it (physical index)."""

    index: int
    uuid: str
    name: str
    mem_used_mib: float | None = None
    mem_total_mib: float | None = None
    util: int | None = None  # percent; None when the driver does not report it
    procs: dict[int, float | None] = field(default_factory=dict)  # pid -> MiB (None: not reported)
    error: str | None = None


def _num(text: str) -> float | None:
    t = text.strip()
    if t.startswith("[") or t in ("N/A", ""):  # [N/A], [Not Supported], [Insufficient Permissions]
        return None
    for unit in (" MiB", " %"):
        if t.endswith(unit):
            t = t[: -len(unit)]
    return float(t)


def _decode(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class NvmlReader:
    """Reads every GPU through NVML (the nvidia-ml-py ``pynvml`` module, or one passed in)."""

    source = "nvml"

    def __init__(self, nvml: Any = None):
        if nvml is None:
            try:
                import pynvml as nvml
            except ImportError as e:
                raise _Unavailable(f"NVML: nvidia-ml-py is not installed ({e})") from None
        self.nvml = nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as e:
            raise _Unavailable(f"NVML: {e}") from None
        try:
            count = nvml.nvmlDeviceGetCount()
            self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            self.ids = [(_decode(nvml.nvmlDeviceGetUUID(h)), _decode(nvml.nvmlDeviceGetName(h))) for h in self.handles]
        except nvml.NVMLError as e:
            self.close()
            raise _Unavailable(f"NVML: {e}") from None

    def read(self) -> list[Reading]:
        nv = self.nvml
        out = []
        for i, (h, (uuid, name)) in enumerate(zip(self.handles, self.ids)):
            r = Reading(i, uuid, name)
            try:
                try:
                    mem = nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2)  # used excludes reserved
                except (nv.NVMLError, AttributeError, TypeError):
                    mem = nv.nvmlDeviceGetMemoryInfo(h)
                r.mem_used_mib, r.mem_total_mib = mem.used / MIB, mem.total / MIB
                try:
                    r.util = int(nv.nvmlDeviceGetUtilizationRates(h).gpu)
                except nv.NVMLError_NotSupported:
                    r.util = None
                for fn in (nv.nvmlDeviceGetComputeRunningProcesses, nv.nvmlDeviceGetGraphicsRunningProcesses):
                    try:
                        plist = fn(h)
                    except nv.NVMLError_NotSupported:
                        continue
                    for p in plist:
                        used = None if p.usedGpuMemory is None else p.usedGpuMemory / MIB
                        old = r.procs.get(p.pid)
                        r.procs[p.pid] = used if old is None else old + (used or 0.0)
            except nv.NVMLError as e:
                r.error = f"NVML: {e}"
            out.append(r)
        return out

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - shutting down a library that may be half-initialised
            pass


SMI_GPU_FIELDS = "index,uuid,name,memory.used,memory.total,utilization.gpu"
SMI_APP_FIELDS = "gpu_uuid,pid,used_memory"


class SmiReader:
    """Reads every GPU by running ``nvidia-smi --query-gpu`` and ``--query-compute-apps``."""

    source = "nvidia-smi"

    def __init__(self, exe: str = "nvidia-smi", why_not_nvml: str | None = None):
        path = shutil.which(exe)
        if path is None:
            raise _Unavailable(f"nvidia-smi: {exe!r} not found on PATH")
        self.exe = path
        self.why_not_nvml = why_not_nvml

    def _run(self, query: str) -> list[tuple[int, list[str]]]:
        try:
            # errors="replace": a garbled byte (a GPU name, a broken driver) makes a field that does not
            # parse, reported with its line, never a decoding crash
            p = subprocess.run([self.exe, query, "--format=csv,noheader,nounits"], capture_output=True, text=True,
                               encoding="utf-8", errors="replace", timeout=60)
        except subprocess.TimeoutExpired:
            raise GpuError(f"nvidia-smi {query} did not answer in 60 s") from None
        text = (p.stdout + p.stderr).strip()
        if p.returncode != 0:
            last = text.splitlines()[-1] if text else f"exit status {p.returncode}"
            if p.returncode in (6, 9) or "No devices were found" in text or "couldn't communicate" in text:
                extra = f"; {self.why_not_nvml}" if self.why_not_nvml else ""
                raise NoGpuError(f"no NVIDIA GPU: nvidia-smi: {last}{extra}")
            raise GpuError(f"nvidia-smi {query} failed (exit status {p.returncode}): {last}")
        rows = []
        for n, line in enumerate(p.stdout.splitlines(), 1):
            if not line.strip() or line.strip().startswith("No running processes"):
                continue
            rows.append((n, next(csv.reader([line], skipinitialspace=True))))
        return rows

    def read(self) -> list[Reading]:
        out: list[Reading] = []
        by_uuid: dict[str, Reading] = {}
        q = f"--query-gpu={SMI_GPU_FIELDS}"
        for n, row in self._run(q):
            where = f"nvidia-smi {q} output line {n}"
            if len(row) != 6:
                raise GpuError(f"{where}: expected 6 fields, got {len(row)}: {', '.join(row)!r}")
            try:
                r = Reading(int(row[0]), row[1].strip(), row[2].strip())
            except ValueError:
                raise GpuError(f"{where}: field index is not an integer: {row[0]!r}") from None
            for key, text in zip(("mem_used_mib", "mem_total_mib", "util"), row[3:]):
                try:
                    v = _num(text)
                except ValueError:
                    raise GpuError(f"{where}: field {key} is not a number: {text!r}") from None
                setattr(r, key, None if v is None else (int(v) if key == "util" else v))
            if r.mem_used_mib is None or r.mem_total_mib is None:
                r.error = "nvidia-smi: memory use not reported"
            out.append(r)
            by_uuid[r.uuid] = r
        if not out:
            raise NoGpuError("no NVIDIA GPU: nvidia-smi listed no devices")
        q = f"--query-compute-apps={SMI_APP_FIELDS}"
        for n, row in self._run(q):
            where = f"nvidia-smi {q} output line {n}"
            if len(row) != 3:
                raise GpuError(f"{where}: expected 3 fields, got {len(row)}: {', '.join(row)!r}")
            r = by_uuid.get(row[0].strip())
            if r is None:
                raise GpuError(f"{where}: field gpu_uuid names no GPU of --query-gpu: {row[0]!r}")
            try:
                pid = int(row[1])
                used = _num(row[2])
            except ValueError:
                raise GpuError(f"{where}: field pid/used_memory is not a number: {row[1]!r}, {row[2]!r}") from None
            r.procs[pid] = used
        return out

    def close(self) -> None:
        pass


def open_reader(backend: str = "auto", nvml: Any = None, smi: str = "nvidia-smi"):
    """A started reader: ``auto`` tries NVML, then nvidia-smi. Raises NoGpuError if neither works."""
    if backend not in ("auto", "nvml", "smi"):
        raise ValueError(f"backend must be auto, nvml or smi, not {backend!r}")
    why = []
    if backend in ("auto", "nvml"):
        try:
            return NvmlReader(nvml)
        except _Unavailable as e:
            why.append(str(e))
    if backend in ("auto", "smi"):
        try:
            return SmiReader(smi, why_not_nvml=why[0] if why else None)
        except _Unavailable as e:
            why.append(str(e))
    raise NoGpuError("no NVIDIA GPU driver: " + "; ".join(why))


def parse_visible(value: str | None, devices: Sequence[tuple[int, str]]) -> tuple[list[int], list[str]]:
    """Physical indices that CUDA_VISIBLE_DEVICES=value exposes, in its order, plus warnings.

    devices: (index, uuid) of every GPU. Entries are indices or (prefixes of) GPU UUIDs;
    like CUDA, the list ends at the first entry that names no GPU. None means unset: all.
    """
    if value is None:
        return [i for i, _ in devices], []
    out: list[int] = []
    warnings: list[str] = []
    for tok in (t.strip() for t in value.split(",")):
        if not tok:
            break
        if tok.startswith("MIG-"):
            warnings.append(f"CUDA_VISIBLE_DEVICES entry {tok!r}: MIG instances are not handled; ignored")
            continue
        hit = None
        if tok.lstrip("-").isdigit():
            hit = next((i for i, _ in devices if i == int(tok)), None)
        else:
            want = tok if tok.startswith("GPU-") else f"GPU-{tok}"
            hits = [i for i, u in devices if u.startswith(want)]
            hit = hits[0] if len(hits) == 1 else None
        if hit is None or hit in out:
            if tok != "-1":
                what = "repeats a GPU" if hit is not None else "names no GPU"
                warnings.append(f"CUDA_VISIBLE_DEVICES entry {tok!r} {what}: the list ends there (as in CUDA)")
            break
        out.append(hit)
    return out, warnings
