/*
 * dk_pystream.c — which stream a GPU tensor is asked for, and dkit's current stream for a call
 * (Note [The consumer's stream]). Used by the DLPack import (dk_pydlpack.c), which calls it
 * for producers on devices with streams and restores the streams when it releases a call's
 * tensors.
 */
#include "dk_pydlpack.h"

/*
 * Note [The consumer's stream]
 * A producer on a device with streams is asked for its tensor with `__dlpack__(stream=S)`, S
 * being the stream dkit's kernel will run on, the first of:
 *   1. the calling thread's current stream for that device (dk_current_stream; dkit.stream()
 *      sets it);
 *   2. the producer's framework's current stream, where the framework told _C how to find it
 *      (set_stream_getter(type, fn): torch.Tensor -> torch.cuda.current_stream(i), set by
 *      dkit/_torch_library.py). It becomes dkit's current stream for this call only (restored
 *      by dk_py_owners_release), so the kernel runs where torch's next op will read its output,
 *      as a torch op would;
 *   3. the device's default stream (CUDA: 1, the protocol's "legacy default stream"; ROCm: 0).
 * The producer then makes its pending work on the tensor visible to S (torch records an event
 * on its current stream and makes S wait for it, nothing when S is its current stream), so the
 * kernel reads finished data without a device-wide synchronisation.
 * Returns 1 with *stream set, 0 for devices without streams (no stream argument is passed), -1
 * with an exception set when the framework's getter fails.
 */
/* The stream value the protocol uses for a device's default stream (-1: no streams). */
static long dk__default_stream(int64_t device_type)
{
    switch (device_type) {
    case kDLCUDA:
    case kDLCUDAManaged: return 1; /* the legacy default stream */
    case kDLROCM: return 0;
    default: return -1;
    }
}

/* obj's framework's current stream on device_id, through its set_stream_getter function: 1 with
 * *ptr set (NULL: the default stream), 0 when its framework gave none, -1 with an exception set. */
static int dk__framework_stream(dk_py_state *s, PyObject *obj, int64_t device_id, const char *op, const char *arg,
                                void **ptr)
{
    PyObject *mro = Py_TYPE(obj)->tp_mro, *getter = NULL;
    for (Py_ssize_t i = 0; s->stream_getters && !getter && mro && i < PyTuple_GET_SIZE(mro); i++)
        getter = PyDict_GetItemWithError(s->stream_getters, PyTuple_GET_ITEM(mro, i)); /* borrowed */
    if (PyErr_Occurred()) return -1;
    if (!getter) return 0;
    PyObject *r = PyObject_CallFunction(getter, "L", (long long)device_id);
    *ptr = r && PyLong_Check(r) ? PyLong_AsVoidPtr(r) : NULL;
    if (r && !PyLong_Check(r))
        PyErr_Format(PyExc_TypeError, "the current stream must be an int, got %s", Py_TYPE(r)->tp_name);
    Py_XDECREF(r);
    if (PyErr_Occurred()) {
        dk_py_raise_fmt(s, DK_ETYPE, "%s: parameter '%s': cannot find its framework's current stream", op, arg);
        return -1;
    }
    return 1;
}

int dk_py_on_framework_stream(dk_py_state *s, PyObject *obj, DLDevice device, dk_py_owners *owners, const char *op,
                              const char *arg)
{
    long stream;
    int r = dk_py_consumer_stream(s, obj, device.device_type, device.device_id, owners, op, arg, &stream);
    if (r <= 0) return r;
    void *ptr = NULL;
    if ((r = dk__framework_stream(s, obj, device.device_id, op, arg, &ptr)) <= 0) return r;
    return stream == (ptr ? (long)(intptr_t)ptr : dk__default_stream(device.device_type));
}

int dk_py_consumer_stream(dk_py_state *s, PyObject *obj, int64_t device_type, int64_t device_id, dk_py_owners *owners,
                          const char *op, const char *arg, long *stream)
{
    const long fallback = dk__default_stream(device_type);
    if (fallback < 0) return 0;
    const DLDevice device = {(DLDeviceType)device_type, (int32_t)device_id};
    void *current = dk_current_stream(device);
    if (!current) {
        void *ptr = NULL;
        const int got = dk__framework_stream(s, obj, device_id, op, arg, &ptr);
        if (got < 0) return -1;
        if (got) {
            void *previous = NULL;
            if (ptr && owners->nstreams < DK_STACK_MAX && dk_set_current_stream(device, ptr, &previous) == DK_OK) {
                owners->streams[owners->nstreams].device = device;
                owners->streams[owners->nstreams].previous = previous;
                owners->nstreams++;
                current = ptr;
            }
        }
    }
    *stream = current ? (long)(intptr_t)current : fallback;
    return 1;
}

/* The current streams set for the call (Note [The consumer's stream]) back to what they were. */
void dk_py_restore_streams(dk_py_owners *owners)
{
    for (int i = owners->nstreams - 1; i >= 0; i--)
        (void)dk_set_current_stream(owners->streams[i].device, owners->streams[i].previous, NULL);
    owners->nstreams = 0;
}
