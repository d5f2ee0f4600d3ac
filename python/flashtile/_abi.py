"""The C ABI (include/flashtile/flashtile.h) through ctypes.

Binding the C ABI rather than compiling a CPython extension keeps one built library usable from any Python
version: the wheel carries libflashtile.so, and this file mirrors the header's structs field for field.
"""
import ctypes
import os
import struct

FT_F32, FT_F16, FT_BF16 = 0, 1, 2
FT_CPU, FT_CUDA = 0, 1
BACKENDS = {"auto": 0, "cpu-reference": 1, "cpu-flash2": 2, "cpu-flash1": 3, "cuda-sm80": 4, "cuda-sm90": 5}
STATUS = {0: "ok", 1: "invalid argument", 2: "unsupported", 3: "out of memory", 4: "device error", 5: "internal"}


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int32), ("device", ctypes.c_int32),
                ("device_index", ctypes.c_int32), ("ndim", ctypes.c_int32), ("shape", ctypes.c_int64 * 4),
                ("stride", ctypes.c_int64 * 4)]


class Options(ctypes.Structure):
    _fields_ = [("softmax_scale", ctypes.c_float), ("causal", ctypes.c_int32), ("window_left", ctypes.c_int64),
                ("window_right", ctypes.c_int64), ("softcap", ctypes.c_float)]


class FwdParams(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("q", Tensor), ("k", Tensor), ("v", Tensor), ("out", Tensor),
                ("lse", Tensor), ("options", Options), ("backend", ctypes.c_int32), ("num_threads", ctypes.c_int32),
                ("stream", ctypes.c_void_p)]


class BwdParams(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("q", Tensor), ("k", Tensor), ("v", Tensor), ("out", Tensor),
                ("lse", Tensor), ("dout", Tensor), ("dq", Tensor), ("dk", Tensor), ("dv", Tensor),
                ("options", Options), ("deterministic", ctypes.c_int32), ("backend", ctypes.c_int32),
                ("num_threads", ctypes.c_int32), ("stream", ctypes.c_void_p), ("workspace", ctypes.c_void_p),
                ("workspace_size", ctypes.c_size_t)]


class FlashtileError(RuntimeError):
    """A call the library refused or could not run; `status` names the kind, the message says why."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = STATUS.get(status, str(status))


def _load():
    here = os.path.dirname(os.path.abspath(__file__))
    override = os.environ.get("FLASHTILE_LIBRARY")  # a library built elsewhere (a build tree, a test)
    candidates = [override] if override else [os.path.join(here, name) for name in ("libflashtile.so", "libflashtile.so.0")]
    for path in candidates:
        if path and os.path.exists(path):
            lib = ctypes.CDLL(path)
            break
    else:
        raise ImportError("flashtile: libflashtile.so not found next to the package (" + here +
                          "); reinstall with `pip install .`, or point FLASHTILE_LIBRARY at a built library")
    msg = (ctypes.c_char_p, ctypes.c_size_t)
    lib.ft_fwd_params_init.argtypes = [ctypes.POINTER(FwdParams)]
    lib.ft_bwd_params_init.argtypes = [ctypes.POINTER(BwdParams)]
    lib.ft_forward.argtypes = [ctypes.POINTER(FwdParams), *msg]
    lib.ft_backward.argtypes = [ctypes.POINTER(BwdParams), *msg]
    lib.ft_select_forward_backend.argtypes = [ctypes.POINTER(FwdParams), ctypes.POINTER(ctypes.c_int), *msg]
    for fn in (lib.ft_forward, lib.ft_backward, lib.ft_select_forward_backend):
        fn.restype = ctypes.c_int
    lib.ft_version.restype = ctypes.c_char_p
    lib.ft_backend_name.restype = ctypes.c_char_p
    lib.ft_backend_name.argtypes = [ctypes.c_int]
    return lib


lib = _load()


class PreparedCalls:
    """Filled parameter structs kept by call shape. A call whose tensors have the dtypes, devices, shapes and
    strides, and whose options are, those of an earlier call copies that call's struct and writes only the data
    pointers and the stream into it: building the five to nine ft_tensors afresh is most of the Python layer's
    per-call time, which a short kernel waits for. Each call fills its own copy, so threads never share one."""

    _POINTER = struct.Struct("P")

    def __init__(self, params_type, tensor_fields, limit=256):
        self._type = params_type
        self._data = [getattr(params_type, f).offset + Tensor.data.offset for f in tensor_fields]
        self._stream = params_type.stream.offset
        self._templates = {}
        self._limit = limit  # distinct call shapes kept; past it the cache starts again (shapes rarely vary that much)

    def params(self, key, build, tensors, stream):
        """The struct for `key` with `tensors`' data pointers (in tensor_fields' order) and `stream` (an int or
        None). build() makes, and checks, a filled struct the first time a key is seen."""
        template = self._templates.get(key)
        if template is None:
            if len(self._templates) >= self._limit:
                self._templates.clear()
            template = self._templates[key] = bytes(build())
        buf = bytearray(template)
        pack = self._POINTER.pack_into
        for offset, t in zip(self._data, tensors):
            pack(buf, offset, t.data_ptr())
        pack(buf, self._stream, stream or 0)
        return self._type.from_buffer(buf)


def call(fn, params, *extra):
    """Runs one entry point; raises FlashtileError with the library's message when it refuses."""
    buf = ctypes.create_string_buffer(1024)
    status = fn(ctypes.byref(params), *extra, buf, len(buf))
    if status != 0:
        raise FlashtileError(status, buf.value.decode(errors="replace"))
