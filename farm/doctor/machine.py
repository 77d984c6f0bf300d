"""This machine's GPUs and driver, read through the driver's own libraries.

NVML (``libnvidia-ml``) first: it names the driver release (``580.65.06``) and each GPU's compute
capability without creating a CUDA context. Then ``libcuda`` (capabilities, and the CUDA version
the driver supports; the release from ``/proc/driver/nvidia/version`` on Linux), then
``nvidia-smi``. No toolkit, no torch: a user's machine has the driver and nothing else.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from farm.errors import ArchError, UsageError
from farm.model.driver import Device
from farm.model.drivers import DriverVersion, table


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    device: Device

    def __str__(self) -> str:
        return f"GPU {self.index} ({self.name}, {self.device})" if self.name else f"GPU {self.index} ({self.device})"


@dataclass(frozen=True)
class Machine:
    """The GPUs and driver a diagnosis is for. ``source``: where they were read (``nvml``,
    ``libcuda``, ``nvidia-smi``, ``given`` for ``--device``/``--driver``); ``notes``: what was
    tried and failed, for the no-GPU message."""

    gpus: tuple[Gpu, ...]
    driver: DriverVersion | None
    source: str
    platform: str
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {
            "source": self.source, "platform": self.platform,
            "driver": str(self.driver) if self.driver else None,
            "driver_cuda": table().newest_cuda(self.driver) if self.driver else None,
            "gpus": [{"index": g.index, "name": g.name, "compute_capability": str(g.device)} for g in self.gpus],
            "notes": list(self.notes),
        }


def _platform() -> str:
    return "win_amd64" if sys.platform == "win32" else f"linux_{os.uname().machine}"


def given(devices: list[Device], driver: DriverVersion | None) -> Machine:
    """Another machine, as ``--device``/``--driver`` describe it."""
    gpus = tuple(Gpu(i, "", d) for i, d in enumerate(devices))
    return Machine(gpus, driver, "given", _platform())


def _load(names: tuple[str, ...]) -> ctypes.CDLL | None:
    for name in names:
        with contextlib.suppress(OSError):
            return ctypes.CDLL(name)
    return None


def _nvml() -> tuple[tuple[Gpu, ...], DriverVersion] | str:
    lib = _load(("nvml.dll",) if sys.platform == "win32" else ("libnvidia-ml.so.1", "libnvidia-ml.so"))
    if lib is None:
        return "libnvidia-ml not found"
    if lib.nvmlInit_v2() != 0:
        return "nvmlInit failed (no driver loaded?)"
    try:
        buf = ctypes.create_string_buffer(96)
        if lib.nvmlSystemGetDriverVersion(buf, 96) != 0:
            return "nvmlSystemGetDriverVersion failed"
        driver = DriverVersion.parse(buf.value.decode(errors="replace"), where="NVML")
        count = ctypes.c_uint(0)
        if lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
            return "nvmlDeviceGetCount failed"
        gpus = []
        for i in range(min(count.value, 64)):
            handle = ctypes.c_void_p()
            major, minor = ctypes.c_int(), ctypes.c_int()
            if lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(handle)) != 0:
                continue
            lib.nvmlDeviceGetName(handle, buf, 96)
            if lib.nvmlDeviceGetCudaComputeCapability(handle, ctypes.byref(major), ctypes.byref(minor)) != 0:
                continue
            gpus.append(Gpu(i, buf.value.decode(errors="replace"), Device(major.value, minor.value)))
        return tuple(gpus), driver
    finally:
        lib.nvmlShutdown()


def _proc_driver() -> DriverVersion | None:
    """The kernel module's release (Linux): ``NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06 ...``."""
    try:
        text = Path("/proc/driver/nvidia/version").read_text(errors="replace")[:4096]
    except OSError:
        return None
    for word in text.split():
        if word[:1].isdigit() and "." in word:
            try:
                return DriverVersion.parse(word)
            except UsageError:  # any other word: keep looking
                continue
    return None


def _libcuda() -> tuple[tuple[Gpu, ...], DriverVersion | None] | str:
    lib = _load(("nvcuda.dll",) if sys.platform == "win32" else ("libcuda.so.1", "libcuda.so"))
    if lib is None:
        return "libcuda not found"
    if lib.cuInit(0) != 0:
        return "cuInit failed (no usable GPU or driver)"
    count = ctypes.c_int(0)
    if lib.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return "cuDeviceGetCount failed"
    gpus = []
    buf = ctypes.create_string_buffer(96)
    for i in range(min(count.value, 64)):
        dev, major, minor = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        if lib.cuDeviceGet(ctypes.byref(dev), i) != 0:
            continue
        lib.cuDeviceGetName(buf, 96, dev)
        lib.cuDeviceGetAttribute(ctypes.byref(major), 75, dev)  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
        lib.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev)  # ..._MINOR
        gpus.append(Gpu(i, buf.value.decode(errors="replace"), Device(major.value, minor.value)))
    return tuple(gpus), _proc_driver()


MAX_OUTPUT = 1 << 20  # what doctor reads of another program's output: a few lines are expected


def run_capped(argv: list[str], *, timeout: float, max_bytes: int = MAX_OUTPUT) -> tuple[int | None, str, str]:
    """``argv``'s exit code, stdout and stderr (at most ``max_bytes`` each, decoded with
    replacement): a program that prints more is stopped there (its code None), one that hangs at
    ``timeout``. OSError when it cannot start; ``subprocess.TimeoutExpired`` at the timeout."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True)
        deadline = time.monotonic() + timeout
        capped = False
        try:
            while proc.poll() is None:
                if max(os.fstat(out.fileno()).st_size, os.fstat(err.fileno()).st_size) > max_bytes:
                    capped = True  # printing without end: what was read is all there is
                    break
                if time.monotonic() > deadline:
                    raise subprocess.TimeoutExpired(argv, timeout)
                time.sleep(0.02)
        finally:
            if proc.poll() is None:
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        out.seek(0)
        err.seek(0)
        return (None if capped else proc.returncode, out.read(max_bytes).decode("utf-8", "replace"),
                err.read(max_bytes).decode("utf-8", "replace"))


def _nvidia_smi() -> tuple[tuple[Gpu, ...], DriverVersion] | str:
    try:
        code, stdout, _ = run_capped(["nvidia-smi", "--query-gpu=index,name,compute_cap,driver_version",
                                      "--format=csv,noheader"], timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"nvidia-smi: {exc}"
    if code is None:
        return f"nvidia-smi printed more than {MAX_OUTPUT >> 20} MiB: not read further"
    if code != 0:
        return f"nvidia-smi exited {code}"
    gpus, driver = [], None
    for line in stdout.splitlines()[:64]:
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 4:
            continue
        try:
            gpus.append(Gpu(int(fields[0]), fields[1], Device.parse(fields[2])))
            driver = DriverVersion.parse(fields[3])
        except (UsageError, ArchError, ValueError):  # a line nvidia-smi wrote differently: skip it
            continue
    if driver is None:
        return "nvidia-smi printed no GPU"
    return tuple(gpus), driver


def probe() -> Machine:
    """This machine: NVML, else libcuda, else nvidia-smi; no GPU is an answer, not an error."""
    notes: list[str] = []
    for source, read in (("nvml", _nvml), ("libcuda", _libcuda), ("nvidia-smi", _nvidia_smi)):
        try:
            got = read()
        except (OSError, AttributeError, ValueError) as exc:  # a library without the symbol, a garbled answer
            got = f"{source}: {exc}"
        if not isinstance(got, str):
            return Machine(*got, source, _platform(), tuple(notes))
        notes.append(got)
    return Machine((), None, "none", _platform(), tuple(notes))
