"""Moving a forward's outputs from the untrusted candidate process to the trusted comparer.

Two transports, both validated on the trusted side and neither running any code of the sender's
(no pickle):

- ``file`` (CPU, and the CUDA default): the candidate writes its tensors' raw bytes, one after
  the other, into a file in its private directory and sends the file's name with each tensor's
  dtype, shape and device; the comparer checks that the path stays inside that directory, that
  the description is well formed, not much larger than the expected output and exactly the
  file's size, and reads the bytes into tensors of its own (plain reads: a file the candidate
  truncates meanwhile is a short read, never a fault). No deserializer runs on the candidate's
  bytes, and there is nothing to parse but the description: about 4x faster than ``torch.save``
  and ``torch.load`` for the 128 MB of seed problem 1 (benchmarks/compile_breakdown.py).
- ``memfd`` (an audited timed call, `harness.meter`): the metered loop writes its captured copy of
  the output into a memfd and seals it (no write, no resize, for anyone, from then on) before it
  sends it; the trusted side forwards the descriptor with the compare request, and the comparer
  checks the seals, the description and the size before it reads.
- ``cuda_ipc`` (CUDA): the candidate sends, per tensor, the IPC handle of its allocation (from
  the caching allocator), the offset, dtype, shape and strides; the comparer opens the handle
  with ``cudaIpcOpenMemHandle``, checks the view fits inside the allocation, copies the tensor
  into its own memory and closes the handle. Nothing crosses the PCIe bus.

Inputs are never shipped: each side regenerates them from the trial's seed.
"""

from __future__ import annotations

import base64
import ctypes
import fcntl
import math
import os
import stat
from pathlib import Path
from typing import Any

import torch

from vocabulary.wire import JsonObject, JsonValue

__all__ = ["TRANSPORTS", "OutputRejected", "export_output", "import_output"]

TRANSPORTS = ("file", "cuda_ipc")
#: Accepted outputs are at most this many times the expected size (plus a small allowance).
_SIZE_SLACK = 2
_SIZE_ALLOWANCE = 1 << 20
_IPC_HANDLE_BYTES = 64
#: Bounds on a file descriptor's description (outputs are a few tensors of ordinary rank).
_MAX_TENSORS = 64
_MAX_DIMS = 16
#: fcntl's F_GET_SEALS and the seals an audited output must carry.
_F_GET_SEALS = 1034
_REQUIRED_SEALS = 0x0002 | 0x0004 | 0x0008  # shrink, grow, write
#: torch's shareable-handle prefix: a version byte, then "c" for a cudaMalloc'd block.
_TORCH_HANDLE_CUDA_MALLOC = ord("c")
_DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int16,
    torch.int32, torch.int64, torch.bool, torch.complex64,
)}


class OutputRejected(ValueError):
    """The candidate's output is missing, too large, malformed or not tensors."""


def _as_tensors(output: Any) -> tuple[list[torch.Tensor], bool] | None:
    if isinstance(output, torch.Tensor):
        return [output], True
    if isinstance(output, (tuple, list)) and all(isinstance(t, torch.Tensor) for t in output):
        return list(output), False
    return None


def _ipc_describe(t: torch.Tensor) -> JsonObject | None:
    """Describe a CUDA tensor by its allocation's IPC handle, or None if it cannot be shared."""
    if not t.is_cuda or str(t.dtype).removeprefix("torch.") not in _DTYPES:
        return None
    shared = t.untyped_storage()._share_cuda_()
    device, handle, storage_bytes, offset_bytes = shared[0], shared[1], shared[2], shared[3]
    if len(handle) == _IPC_HANDLE_BYTES + 2 and handle[1] == _TORCH_HANDLE_CUDA_MALLOC:
        handle = handle[2:]
    elif len(handle) != _IPC_HANDLE_BYTES:
        return None  # an expandable segment: not a plain cudaMalloc handle
    return {
        "device": int(device), "handle": base64.b64encode(handle).decode(),
        "storage_bytes": int(storage_bytes), "offset_bytes": int(offset_bytes),
        "dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape), "stride": list(t.stride()),
        "storage_offset": int(t.storage_offset()),
    }


def export_output(output: Any, directory: Path, name: str, *, transport: str = "file") -> JsonObject:
    """Hand a forward's output to the comparer; non-tensor outputs are described, not sent.

    With ``cuda_ipc`` the caller must keep ``output`` alive until the comparer has copied it.
    """
    found = _as_tensors(output)
    if found is None:
        return {"kind": "invalid", "type": type(output).__name__}
    tensors, single = found
    if transport == "cuda_ipc" and all(t.is_cuda for t in tensors):
        described = [_ipc_describe(t) for t in tensors]
        if all(d is not None for d in described):
            return {"kind": "cuda_ipc", "tensors": described, "single": single}
    path = directory / f"{name}.bin"
    specs: list[JsonValue] = []
    with open(path, "wb") as fh:
        for t in tensors:
            cpu = t.detach().to("cpu").contiguous()
            specs.append({"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape),
                          "device": t.device.type})
            if cpu.numel():
                fh.write(cpu.reshape(-1).view(torch.uint8).numpy().data)
    return {"kind": "file", "name": path.name, "tensors": specs, "single": single}


def _file_specs(desc: JsonObject) -> list[tuple[torch.dtype, list[int], str, int]]:
    """``(dtype, shape, device type, bytes)`` per tensor of a file descriptor, validated."""
    specs = desc.get("tensors")
    if not isinstance(specs, list) or not specs or len(specs) > _MAX_TENSORS:
        raise OutputRejected("malformed output descriptor")
    checked = []
    for spec in specs:
        if not isinstance(spec, dict):
            raise OutputRejected("malformed output descriptor")
        dtype, shape, device = _DTYPES.get(spec.get("dtype", "")), spec.get("shape"), spec.get("device")
        if (dtype is None or not isinstance(shape, list) or len(shape) > _MAX_DIMS or device not in ("cpu", "cuda")
                or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)):
            raise OutputRejected("malformed output descriptor")
        nbytes = math.prod(shape) * dtype.itemsize
        checked.append((dtype, shape, device, nbytes))
    return checked


def _read_tensors(fh: Any, specs: list[tuple[torch.dtype, list[int], str, int]]) -> list[torch.Tensor]:
    tensors = []
    for dtype, shape, _, nbytes in specs:
        raw = torch.empty(nbytes, dtype=torch.uint8)
        view, filled = raw.numpy().data, 0
        while filled < nbytes:
            got = fh.readinto(view[filled:])
            if not got:
                raise OutputRejected("output shorter than its description")
            filled += got
        tensors.append(raw.view(dtype).reshape(shape))
    return tensors


def _placed(tensors: list[torch.Tensor], specs: list[tuple[torch.dtype, list[int], str, int]], single: object,
            device: torch.device) -> Any:
    # A tensor from the wrong device stays on the CPU, so the comparer reports the mismatch.
    moved = [t.to(device) if dev == device.type else t for t, (_, _, dev, _) in zip(tensors, specs, strict=True)]
    return moved[0] if single is True and len(moved) == 1 else moved


def _import_memfd(desc: JsonObject, fds: tuple[int, ...], expected_bytes: int, device: torch.device) -> Any:
    index = desc.get("fd")
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(fds):
        raise OutputRejected("malformed output descriptor")
    specs = _file_specs(desc)
    total = sum(nbytes for *_, nbytes in specs)
    if total > _SIZE_SLACK * expected_bytes + _SIZE_ALLOWANCE:
        raise OutputRejected(f"output of {total} bytes; expected about {expected_bytes}")
    fd = fds[index]
    try:
        seals = fcntl.fcntl(fd, _F_GET_SEALS)
        info = os.fstat(fd)
    except OSError:
        raise OutputRejected("the audited output is not a sealed memfd") from None
    if seals & _REQUIRED_SEALS != _REQUIRED_SEALS or not stat.S_ISREG(info.st_mode):
        raise OutputRejected("the audited output is not a sealed memfd")
    if info.st_size != total:
        raise OutputRejected("output size does not match its description")
    with open(os.dup(fd), "rb", buffering=0) as fh:
        fh.seek(0)
        tensors = _read_tensors(fh, specs)
    return _placed(tensors, specs, desc.get("single"), device)


def _import_file(desc: JsonObject, directory: Path, expected_bytes: int, device: torch.device) -> Any:
    name = desc.get("name")
    if not isinstance(name, str) or "/" in name or name.startswith("."):
        raise OutputRejected("malformed output descriptor")
    specs = _file_specs(desc)
    total = sum(nbytes for *_, nbytes in specs)
    if total > _SIZE_SLACK * expected_bytes + _SIZE_ALLOWANCE:
        raise OutputRejected(f"output of {total} bytes; expected about {expected_bytes}")
    path = directory / name
    real = Path(os.path.realpath(path))
    if real.parent != Path(os.path.realpath(directory)):
        raise OutputRejected("output file missing or outside the candidate's directory")
    # No following a link swapped in since the check, no blocking on a FIFO: a regular file only.
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        raise OutputRejected("output file missing or outside the candidate's directory") from None
    with open(fd, "rb", buffering=0) as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise OutputRejected("output file missing or outside the candidate's directory")
        if info.st_size != total:
            raise OutputRejected("output file size does not match its description")
        tensors = _read_tensors(fh, specs)
    return _placed(tensors, specs, desc.get("single"), device)


class _IpcHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * _IPC_HANDLE_BYTES)]


def _cudart() -> ctypes.CDLL:
    """The CUDA runtime torch loaded into this process."""
    torch.cuda.init()
    with open("/proc/self/maps") as fh:
        for line in fh:
            path = line.split()[-1]
            if "libcudart.so" in os.path.basename(path):
                return ctypes.CDLL(path)
    return ctypes.CDLL("libcudart.so")


class _CudaArray:
    """A raw device byte range, wrapped for ``torch.as_tensor`` without a copy."""

    def __init__(self, ptr: int, nbytes: int) -> None:
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False),
                                         "version": 3, "strides": None}


def _validated_view_bytes(spec: dict[str, Any]) -> tuple[torch.dtype, int]:
    dtype = _DTYPES.get(spec.get("dtype", ""))
    shape, stride = spec.get("shape"), spec.get("stride")
    if dtype is None or not isinstance(shape, list) or not isinstance(stride, list) or len(shape) != len(stride):
        raise OutputRejected("malformed CUDA output descriptor")
    scalars = (spec.get("storage_offset", -1), spec.get("storage_bytes", -1), spec.get("offset_bytes", -1))
    if any(not isinstance(v, int) or v < 0 for v in (*shape, *stride, *scalars)):
        raise OutputRejected("malformed CUDA output descriptor")
    itemsize = torch.empty((), dtype=dtype).element_size()
    last = spec["storage_offset"] + sum((n - 1) * s for n, s in zip(shape, stride, strict=True) if n > 0)
    needed = 0 if 0 in shape else (last + 1) * itemsize
    if needed > spec["storage_bytes"]:
        raise OutputRejected("CUDA output view runs past its allocation")
    return dtype, needed


def _import_ipc(desc: JsonObject, expected_bytes: int, device: torch.device) -> Any:
    specs = desc.get("tensors")
    if not isinstance(specs, list) or not specs:
        raise OutputRejected("malformed CUDA output descriptor")
    total = 0
    for spec in specs:
        _, needed = _validated_view_bytes(spec)
        total += needed
    if total > _SIZE_SLACK * expected_bytes + _SIZE_ALLOWANCE:
        raise OutputRejected(f"output of {total} bytes; expected about {expected_bytes}")
    cudart = _cudart()
    opened: dict[str, int] = {}
    copies = []
    try:
        for spec in specs:
            key = spec["handle"]
            if key not in opened:
                raw = base64.b64decode(key)
                if len(raw) != _IPC_HANDLE_BYTES:
                    raise OutputRejected("malformed CUDA IPC handle")
                ptr = ctypes.c_void_p()
                err = cudart.cudaIpcOpenMemHandle(ctypes.byref(ptr), _IpcHandle(raw), ctypes.c_uint(1))
                if err != 0:
                    raise OutputRejected(f"cannot open the output's CUDA IPC handle (error {err})")
                opened[key] = int(ptr.value or 0)
            dtype, _ = _validated_view_bytes(spec)
            base = opened[key] + int(spec["offset_bytes"])
            raw_bytes = torch.as_tensor(_CudaArray(base, int(spec["storage_bytes"])), device=device)
            typed = raw_bytes[: raw_bytes.numel() - raw_bytes.numel() % torch.empty((), dtype=dtype).element_size()]
            view = typed.view(dtype).as_strided(spec["shape"], spec["stride"], spec["storage_offset"])
            copies.append(view.clone())
        torch.cuda.synchronize(device)
    finally:
        for address in opened.values():
            cudart.cudaIpcCloseMemHandle(ctypes.c_void_p(address))
    return copies[0] if desc.get("single") and len(copies) == 1 else copies


def import_output(desc: JsonValue, directory: Path, *, expected_bytes: int, device: torch.device,
                  fds: tuple[int, ...] = ()) -> Any:
    """Load and validate what `export_output` (or the metered loop's audit, from ``fds``) sent;
    returns a tensor or a list of tensors."""
    if not isinstance(desc, dict):
        raise OutputRejected("malformed output descriptor")
    kind = desc.get("kind")
    if kind == "invalid":
        raise OutputRejected(f"forward returned {desc.get('type')}, expected tensor output(s)")
    if kind == "file":
        return _import_file(desc, directory, expected_bytes, device)
    if kind == "memfd":
        return _import_memfd(desc, fds, expected_bytes, device)
    if kind == "cuda_ipc" and device.type == "cuda":
        return _import_ipc(desc, expected_bytes, device)
    raise OutputRejected("malformed output descriptor")
