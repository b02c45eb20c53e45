"""DLPack's C structs as ctypes, for tests that build capsules by hand (versioned, read-only,
fake devices). Mirrors csrc/common/dk_dlpack.h."""

import ctypes


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", DELETER),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


capsule_new = ctypes.pythonapi.PyCapsule_New
capsule_new.restype = ctypes.py_object
capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


# Producers with tensors out whose deleters have not run yet (a capsule never consumed keeps its
# producer to the end of the process: a test helper may leak, never crash).
_HANDED_OUT = {}


class CtypesProducer:
    """A DLPack producer of a framework dkit does not know (neither torch nor NumPy): legacy
    "dltensor" capsules, as NumPy 1.x and torch 1.13 consume them, made with ctypes over a NumPy
    array's memory (CPU by default; `device` only changes what it claims). `deleted` counts the
    deleter's calls; everything C points at lives as long as the producer, and the producer at
    least until the deleter of every tensor it handed out has run: a consumer (a torch tensor
    made with from_dlpack) may outlive it, and calls that deleter when it dies (a producer kept
    only by its caller's expression, freed first, made the deleter a freed ctypes callback: a
    crash whenever the memory was reused)."""

    _CODES = {"f": 2, "i": 0, "u": 1, "b": 6}

    def __init__(self, array, device=(1, 0)):
        self.array = array
        self.device = device
        self.deleted = 0
        self._shape = (ctypes.c_int64 * array.ndim)(*array.shape)
        self._strides = (ctypes.c_int64 * array.ndim)(*(s // array.itemsize for s in array.strides))
        self._deleter = DELETER(self._delete)
        self._made = []  # managed tensors handed out, kept for their consumers

    def _delete(self, ptr):
        self.deleted += 1
        if self.deleted >= len(self._made):
            _HANDED_OUT.pop(id(self), None)

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, stream=None):
        a = self.array
        dtype = DLDataType(self._CODES[a.dtype.kind], a.itemsize * 8, 1)
        m = DLManagedTensor(DLTensor(a.ctypes.data, DLDevice(*self.device), a.ndim, dtype, self._shape,
                                     self._strides, 0), None, self._deleter)  # fmt: skip
        self._made.append(m)
        _HANDED_OUT[id(self)] = self  # until its consumers have called the deleter
        return capsule_new(ctypes.addressof(m), b"dltensor", None)
