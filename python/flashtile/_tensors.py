"""Array views for the C ABI: any DLPack array (numpy, CuPy, ...) or torch tensor becomes an ft_tensor, and
outputs are allocated by the same library as the inputs, on the same device."""
import ctypes
import sys

from . import _abi

# DLPack (dlpack.h): the C structs a __dlpack__() capsule points to.
_DL_FLOAT, _DL_BFLOAT = 2, 4
# DLDataTypeCode's kinds whose name takes the bit count ("float64", "int32", "complex128"), and its other codes,
# to name a refused dtype as the array's library does rather than by its code.
_DL_KINDS = {0: "int", 1: "uint", 2: "float", 4: "bfloat", 5: "complex"}
_DL_CODE_NAMES = {6: "bool", 7: "float8_e3m4", 8: "float8_e4m3", 9: "float8_e4m3b11fnuz",
                  10: "float8_e4m3fn", 11: "float8_e4m3fnuz", 12: "float8_e5m2", 13: "float8_e5m2fnuz",
                  14: "float8_e8m0fnu", 15: "float6_e2m3fn", 16: "float6_e3m2fn", 17: "float4_e2m1fn"}
_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED = 1, 2, 3, 13


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32), ("dtype", _DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


# DLPack 1.0's versioned capsule ("dltensor_versioned"): a version, the manager's context and deleter, and flags
# (one says read-only) ahead of the DLTensor. Producers give read-only arrays (numpy's broadcast views, say)
# only this way; the unversioned capsule ("dltensor") is the DLTensor itself, first in its struct.
class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64), ("dl_tensor", _DLTensor)]


_DL_READ_ONLY = 1


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_named = ctypes.pythonapi.PyCapsule_IsValid
_capsule_named.restype = ctypes.c_int
_capsule_named.argtypes = [ctypes.py_object, ctypes.c_char_p]

_TORCH_DTYPES = {}  # torch.dtype -> ft dtype, filled on the first torch tensor (torch is imported only if used)
_Dims = ctypes.c_int64 * 4


def is_torch(x):
    return type(x).__module__.startswith("torch")


def torch_layout(t):
    """Everything an ft_tensor of torch tensor t holds but its data pointer (View._from_torch): a cache key."""
    return t.dtype, t.get_device(), t.shape, t.stride()


def check_array(name, x):
    """Raises a TypeError naming argument `name` unless x is an array this module can view."""
    if not hasattr(x, "__dlpack__"):
        raise TypeError(f"{name}: expected an array with __dlpack__ (numpy, CuPy, torch), got {type(x).__name__}")


def _dtype_refused(name, dtype):
    accepted = "lse must be float32" if name == "lse" else "float16, bfloat16, float32 on the CPU"
    return TypeError(f"{name}: dtype {dtype} is not supported ({accepted})")


def _dl_dtype_name(t):
    if t.code in _DL_KINDS:
        name = f"{_DL_KINDS[t.code]}{t.bits}"
    else:
        name = _DL_CODE_NAMES.get(t.code, f"with DLPack type code {t.code}, {t.bits} bits")
    return name if t.lanes == 1 else f"{name} x {t.lanes} lanes"


def _torch_dtype(dtype):
    if not _TORCH_DTYPES:
        import torch
        _TORCH_DTYPES.update({torch.float32: _abi.FT_F32, torch.float16: _abi.FT_F16, torch.bfloat16: _abi.FT_BF16})
    return _TORCH_DTYPES.get(dtype)


class View:
    """An ft_tensor for `array`, keeping alive whatever the pointer depends on (a DLPack capsule). An `output`
    must be writable."""

    def __init__(self, array, name, output=False):
        self.array, self.name = array, name
        if is_torch(array):
            self._from_torch(array)
        else:
            self.tensor = _abi.Tensor()
            self._from_dlpack(array, output)

    def _from_torch(self, t):
        # The hot path of every torch call (five tensors a forward): one ctypes constructor, no per-field sets.
        dtype = _torch_dtype(t.dtype)
        if dtype is None:
            raise _dtype_refused(self.name, t.dtype)
        n = t.dim()
        if n > 4:
            raise ValueError(f"{self.name}: expected at most 4 dims, got {n}")
        cuda = t.is_cuda
        self.tensor = _abi.Tensor(t.data_ptr() or None, dtype, _abi.FT_CUDA if cuda else _abi.FT_CPU,
                                  t.get_device() if cuda else 0, n, _Dims(*t.shape), _Dims(*t.stride()))

    def _from_dlpack(self, a, output):
        check_array(self.name, a)
        try:
            try:
                self.capsule = a.__dlpack__(max_version=(1, 0))
            except TypeError:  # a producer from before DLPack 1.0: no max_version, no read-only arrays
                self.capsule = a.__dlpack__()
        except BufferError as e:
            raise ValueError(f"{self.name}: the array cannot be shared through DLPack ({e})") from None
        if _capsule_named(self.capsule, b"dltensor_versioned"):
            managed = _DLManagedTensorVersioned.from_address(_capsule_pointer(self.capsule, b"dltensor_versioned"))
            if output and managed.flags & _DL_READ_ONLY:
                raise ValueError(f"{self.name}: the array is read-only; outputs must be writable")
            dl = managed.dl_tensor
        else:
            dl = _DLTensor.from_address(_capsule_pointer(self.capsule, b"dltensor"))
        if dl.dtype.lanes != 1 or (dl.dtype.code, dl.dtype.bits) not in ((_DL_FLOAT, 32), (_DL_FLOAT, 16), (_DL_BFLOAT, 16)):
            raise _dtype_refused(self.name, _dl_dtype_name(dl.dtype))
        dtype = {(_DL_FLOAT, 32): _abi.FT_F32, (_DL_FLOAT, 16): _abi.FT_F16, (_DL_BFLOAT, 16): _abi.FT_BF16}[
            (dl.dtype.code, dl.dtype.bits)]
        if dl.ndim > 4:
            raise ValueError(f"{self.name}: expected at most 4 dims, got {dl.ndim}")
        shape = [dl.shape[i] for i in range(dl.ndim)]
        if dl.strides:
            strides = [dl.strides[i] for i in range(dl.ndim)]
        else:  # compact row-major
            strides, step = [0] * dl.ndim, 1
            for i in reversed(range(dl.ndim)):
                strides[i], step = step, step * max(shape[i], 1)
        kind = dl.device.device_type
        device = _abi.FT_CPU if kind in (_DL_CPU, _DL_CUDA_HOST) else _abi.FT_CUDA
        if kind not in (_DL_CPU, _DL_CUDA_HOST, _DL_CUDA, _DL_CUDA_MANAGED):
            raise TypeError(f"{self.name}: DLPack device type {kind} is not supported (CPU or CUDA)")
        self._fill((dl.data or 0) + dl.byte_offset, dtype, device, dl.device.device_id, shape, strides)

    def _fill(self, ptr, dtype, device, index, shape, strides):
        t = self.tensor
        t.data, t.dtype, t.device, t.device_index, t.ndim = ptr or None, dtype, device, index, len(shape)
        for i, (n, s) in enumerate(zip(shape, strides)):
            t.shape[i], t.stride[i] = n, s


def empty_like_library(ref, shape, dtype_name):
    """A new array of `shape` from the library `ref` comes from, on ref's device; dtype 'same' or 'float32'."""
    if is_torch(ref):
        import torch
        return torch.empty(shape, dtype=ref.dtype if dtype_name == "same" else torch.float32, device=ref.device)
    module = sys.modules[type(ref).__module__.split(".")[0]]
    if not hasattr(module, "empty"):
        raise TypeError(f"cannot allocate outputs like a {type(ref).__name__}: pass out= / lse= arrays")
    return module.empty(shape, dtype=ref.dtype if dtype_name == "same" else "float32")
