"""Any other DLPack producer (Note [The framework protocol]), served through NumPy, on the CPU.

dkit can read every `__dlpack__` producer, but it can allocate only with frameworks it knows.
For a tensor of any other framework (JAX, CuPy, a hand-made producer, ...) the outputs are
therefore NumPy arrays: the input is viewed as a NumPy array (numpy.from_dlpack; Note [Read-only
arrays] in numpy.py for the copy NumPy 1.x forces), everything else is NumPy's. NumPy never reads
the producer's capsule itself: dkit's core accepts it first (_C.dlpack_checked, Note [Checked
exports] in csrc/python/dk_pychecked.c), so a malformed one (NULL data, a NULL shape, an absurd
ndim) is refused with an error naming the op and the parameter, as on every other path. That limits such
tensors to memory the host can read and to NumPy's dtypes (no bfloat16).

A module of its own although it adds nothing to NumPy's functions: it is a framework of its own
to the caller (name_of() says 'dlpack', and its outputs are not of the input's type), and it is
where allocating in the producer's own framework would go, e.g. through the array API's
__array_namespace__(), without touching the NumPy path.
"""

from dkit._frameworks import numpy as _numpy

NAME = "dlpack"
AS_IS = None

as_tensor = _numpy.as_tensor  # producers: _C.dlpack_checked, a device check, numpy.from_dlpack
new_empty = _numpy.new_empty
empty = _numpy.empty
dtype_name = _numpy.dtype_name
cat = _numpy.cat
rois_from_boxes = _numpy.rois_from_boxes
first_rows = _numpy.first_rows
category_codes = _numpy.category_codes
wants_grad = _numpy.wants_grad
apply = _numpy.apply
autocast = _numpy.autocast
to_dtype = _numpy.to_dtype
