"""GPU memory shared between two processes by a POSIX file descriptor (CUDA's virtual memory
management API through the driver library, as timing.py reaches it): the candidate's process
copies its output into an exportable allocation, the reference process imports it, maps it
read-only, copies it device to device into its own memory and unmaps it at once.

Why not torch's CUDA IPC (cudaIpcGetMemHandle): a legacy IPC handle names its exporter's
process, and the sandbox runs the candidate in a PID namespace of its own, where the reference
process cannot open it. A descriptor passed over a socket needs no shared namespace.

Every driver call's result is checked; a failure raises RuntimeError (the candidate's side
falls back to files, the reference's side turns it into the verdict's reason).
"""

from __future__ import annotations

import ctypes
from typing import Any

from kcoder.evaluate.harness.timing import cuda_driver

ALLOCATION_PINNED = 1  # CU_MEM_ALLOCATION_TYPE_PINNED
HANDLE_POSIX_FD = 1  # CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
LOCATION_DEVICE = 1  # CU_MEM_LOCATION_TYPE_DEVICE
ACCESS_READ, ACCESS_READWRITE = 1, 3  # CU_MEM_ACCESS_FLAGS_PROT_*
GRANULARITY_MINIMUM = 0


class _Prop(ctypes.Structure):  # CUmemAllocationProp
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int),
                ("location_type", ctypes.c_int), ("location_id", ctypes.c_int),
                ("win32HandleMetaData", ctypes.c_void_p), ("compressionType", ctypes.c_ubyte),
                ("gpuDirectRDMACapable", ctypes.c_ubyte), ("usage", ctypes.c_ushort),
                ("reserved", ctypes.c_ubyte * 4)]


class _Access(ctypes.Structure):  # CUmemAccessDesc
    _fields_ = [("location_type", ctypes.c_int), ("location_id", ctypes.c_int), ("flags", ctypes.c_int)]


_U64, _SIZE = ctypes.c_ulonglong, ctypes.c_size_t
_SIGNATURES = {
    "cuMemGetAllocationGranularity": [ctypes.POINTER(_SIZE), ctypes.POINTER(_Prop), ctypes.c_int],
    "cuMemCreate": [ctypes.POINTER(_U64), _SIZE, ctypes.POINTER(_Prop), _U64],
    "cuMemAddressReserve": [ctypes.POINTER(_U64), _SIZE, _SIZE, _U64, _U64],
    "cuMemMap": [_U64, _SIZE, _SIZE, _U64, _U64],
    "cuMemSetAccess": [_U64, _SIZE, ctypes.POINTER(_Access), _SIZE],
    "cuMemExportToShareableHandle": [ctypes.c_void_p, _U64, ctypes.c_int, _U64],
    "cuMemImportFromShareableHandle": [ctypes.POINTER(_U64), ctypes.c_void_p, ctypes.c_int],
    "cuMemUnmap": [_U64, _SIZE],
    "cuMemAddressFree": [_U64, _SIZE],
    "cuMemRelease": [_U64],
    "cuMemcpyDtoD_v2": [_U64, _U64, _SIZE],
    "cuCtxSynchronize": [],
    "cuGetErrorName": [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
}
_driver: Any = None


def _lib() -> Any:
    global _driver
    if _driver is None:
        lib = cuda_driver()
        if lib is None:
            raise RuntimeError("the CUDA driver library (libcuda.so.1) could not be loaded")
        for name, argtypes in _SIGNATURES.items():
            getattr(lib, name).argtypes = argtypes
            getattr(lib, name).restype = ctypes.c_int
        _driver = lib
    return _driver


def _check(name: str, *args: Any) -> None:
    lib = _lib()
    code = getattr(lib, name)(*args)
    if code:
        text = ctypes.c_char_p()
        lib.cuGetErrorName(code, ctypes.byref(text))
        raise RuntimeError(f"{name} failed ({(text.value or b'CUDA error').decode()} {code})")


def _prop(device: int) -> _Prop:
    return _Prop(type=ALLOCATION_PINNED, requestedHandleTypes=HANDLE_POSIX_FD, location_type=LOCATION_DEVICE,
                 location_id=device)


def _padded(size: int, device: int) -> int:
    granularity = _SIZE(0)
    _check("cuMemGetAllocationGranularity", ctypes.byref(granularity), ctypes.byref(_prop(device)),
           GRANULARITY_MINIMUM)
    step = max(int(granularity.value), 1)
    return -(-size // step) * step


def _device() -> int:
    import torch

    torch.cuda.init()  # the primary context is current on this thread from here
    return torch.cuda.current_device()


class _Mapping:
    """`size` bytes of an allocation handle mapped at a reserved address, with `access`."""

    def __init__(self, handle: int, size: int, device: int, access: int) -> None:
        self.size, self.ptr = size, _U64(0)
        _check("cuMemAddressReserve", ctypes.byref(self.ptr), size, 0, 0, 0)
        try:
            _check("cuMemMap", self.ptr, size, 0, handle, 0)
        except RuntimeError:
            _check("cuMemAddressFree", self.ptr, size)
            raise
        try:
            try:
                _check("cuMemSetAccess", self.ptr, size, ctypes.byref(_Access(LOCATION_DEVICE, device, access)), 1)
            except RuntimeError:
                if access == ACCESS_READWRITE:
                    raise
                # a driver that maps read-write only: this process still only copies from it
                _check("cuMemSetAccess", self.ptr, size, ctypes.byref(_Access(LOCATION_DEVICE, device,
                                                                              ACCESS_READWRITE)), 1)
        except RuntimeError:
            self.close()
            raise

    def close(self) -> None:
        if self.ptr.value:
            _check("cuMemUnmap", self.ptr, self.size)
            _check("cuMemAddressFree", self.ptr, self.size)
            self.ptr = _U64(0)


class DeviceBuffer:
    """The candidate process's exportable allocation, reused while outputs fit."""

    def __init__(self, size: int) -> None:
        self.device = _device()
        self.size = _padded(size, self.device)
        self.handle = _U64(0)
        _check("cuMemCreate", ctypes.byref(self.handle), self.size, ctypes.byref(_prop(self.device)), 0)
        try:
            self.mapping = _Mapping(self.handle.value, self.size, self.device, ACCESS_READWRITE)
        except RuntimeError:
            _check("cuMemRelease", self.handle)
            raise

    def holds_exactly(self, size: int) -> bool:
        """Whether `size` bytes pad to this buffer's size: the reader maps what `size` pads to,
        and the driver maps an allocation only whole (cuMemMap of a part: CUDA_ERROR_NOT_SUPPORTED)."""
        return self.size == _padded(size, self.device)

    def export(self, parts: list[tuple[Any, int]]) -> int:
        """Copy each (flat uint8 tensor, offset) into the buffer; a new descriptor for it (the
        caller sends and closes it)."""
        import torch

        torch.cuda.synchronize()  # the output's kernels are done
        base = self.mapping.ptr.value
        for flat, offset in parts:
            _check("cuMemcpyDtoD_v2", base + offset, flat.data_ptr(), flat.numel())
        _check("cuCtxSynchronize")
        fd = ctypes.c_int(-1)
        _check("cuMemExportToShareableHandle", ctypes.byref(fd), self.handle, HANDLE_POSIX_FD, 0)
        return fd.value

    def __del__(self) -> None:
        try:
            self.mapping.close()
            _check("cuMemRelease", self.handle)
        except Exception:  # noqa: BLE001 - at exit the driver may be gone already
            pass


def import_copy(fd: int, size: int) -> Any:
    """The first `size` bytes of the allocation behind `fd`, copied into a flat uint8 tensor of
    this process's own (the mapping is read-only and gone before this returns). Raises
    RuntimeError when the descriptor is no such allocation or holds fewer bytes."""
    import torch

    device = _device()
    handle = _U64(0)
    try:
        # the descriptor travels by value, cast to a pointer (the driver's convention for POSIX fds)
        _check("cuMemImportFromShareableHandle", ctypes.byref(handle), ctypes.c_void_p(fd), HANDLE_POSIX_FD)
    except RuntimeError as exc:
        raise RuntimeError(f"the output's descriptor is no shareable CUDA allocation ({exc})") from None
    try:
        try:
            mapping = _Mapping(handle.value, _padded(size, device), device, ACCESS_READ)
        except RuntimeError as exc:
            raise RuntimeError(f"the shared allocation is smaller than its layout says ({exc})") from None
        try:
            own = torch.empty(size, dtype=torch.uint8, device="cuda")
            _check("cuMemcpyDtoD_v2", own.data_ptr(), mapping.ptr.value, size)
            _check("cuCtxSynchronize")
        finally:
            mapping.close()
    finally:
        _check("cuMemRelease", handle)
    return own
