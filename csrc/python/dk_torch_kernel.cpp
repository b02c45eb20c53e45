/*
 * dk_torch_kernel.cpp — dkit._torch_kernel: registers a Python callable as the kernel of a torch
 * op, as torch.library.Library.impl does, except that an exception the callable raises keeps
 * its message everywhere, TorchScript included.
 *
 * Note [Why dkit has its own kernel holder]
 * torch 1.13's Python kernels (torch.library.Library.impl) throw a python_error whose
 * message is never built (it is, only, when the error is persisted). Called from Python, the
 * error indicator is still set and the original exception reaches the caller. Called from the
 * TorchScript interpreter, which rethrows with e.what(), the user gets "RuntimeError: " and no
 * message: a scripted model that calls dkit with a bad box would say nothing about it. This
 * holder persists the error before throwing it, so that what() is the message ("rois[0] has
 * batch index 3, which is not an integer in [0, 1)" under TorchScript) and an eager caller
 * still gets the original exception object (DkitIndexError), which torch's translation of
 * python_error restores.
 *
 * The kernels live as long as the process: the torch::Library objects and the callables are
 * kept on purpose (never destroyed, so nothing runs after the interpreter is gone), as dkit
 * registers each op once (dkit/_torch_library.py). Like dk_pytorch.cpp, the module itself uses
 * the raw CPython C-API; torch's own converters move values between the stack and Python.
 */
#include <Python.h>

#include <torch/csrc/Exceptions.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/library.h>

#include <memory>
#include <string>
#include <vector>

namespace {

class dk_kernel_holder final : public c10::OperatorKernel {
  public:
    explicit dk_kernel_holder(PyObject *fn) : fn_(fn) { Py_INCREF(fn); } /* never released */

    void operator()(const c10::OperatorHandle &op, c10::DispatchKeySet, torch::jit::Stack *stack)
    {
        const c10::FunctionSchema &schema = op.schema();
        std::vector<c10::IValue> args = torch::jit::pop(*stack, schema.arguments().size());
        pybind11::gil_scoped_acquire gil;
        PyObject *tuple = PyTuple_New(static_cast<Py_ssize_t>(args.size()));
        if (!tuple) throw python_error();
        for (size_t i = 0; i < args.size(); i++) {
            pybind11::object value = torch::jit::toPyObject(std::move(args[i]));
            PyTuple_SET_ITEM(tuple, static_cast<Py_ssize_t>(i), value.release().ptr());
        }
        PyObject *out = PyObject_Call(fn_, tuple, nullptr);
        Py_DECREF(tuple);
        if (!out) {
            python_error e; /* Note [Why dkit has its own kernel holder] */
            e.persist();
            throw e;
        }
        pybind11::object result = pybind11::reinterpret_steal<pybind11::object>(out);
        const auto &returns = schema.returns();
        if (returns.size() == 1) {
            torch::jit::push(stack, torch::jit::toIValue(result, returns[0].type()));
        } else if (!returns.empty()) {
            pybind11::tuple outs = result.cast<pybind11::tuple>();
            for (size_t i = 0; i < returns.size(); i++) torch::jit::push(stack, torch::jit::toIValue(outs[i], returns[i].type()));
        }
    }

  private:
    PyObject *fn_;
};

/* impl(name, dispatch_key, fn): fn becomes the kernel of dkit::<name> (an "op.overload" name)
 * at the key ("CPU", "CUDA", "Autograd", ...). */
PyObject *dk_impl(PyObject *, PyObject *args)
{
    const char *ns, *name, *key;
    PyObject *fn;
    if (!PyArg_ParseTuple(args, "sssO:impl", &ns, &name, &key, &fn)) return nullptr;
    if (!PyCallable_Check(fn)) {
        PyErr_SetString(PyExc_TypeError, "impl: the kernel must be callable");
        return nullptr;
    }
    try {
        /* Kept for the process's lifetime (see the file comment). */
        auto *lib = new torch::Library(torch::Library::IMPL, ns, c10::nullopt, __FILE__, __LINE__);
        lib->impl(name, torch::dispatch(c10::parseDispatchKey(key),
                                        torch::CppFunction::makeFromBoxedFunctor(std::make_unique<dk_kernel_holder>(fn))));
    } catch (const std::exception &e) {
        PyErr_SetString(PyExc_RuntimeError, e.what());
        return nullptr;
    }
    Py_RETURN_NONE;
}

PyMethodDef dk_methods[] = {
    {"impl", dk_impl, METH_VARARGS, "impl(namespace, name, dispatch_key, fn): fn as a torch op's kernel at the key."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef dk_module = {
    PyModuleDef_HEAD_INIT, "dkit._torch_kernel", "Python callables as torch kernels whose errors keep their messages.",
    0, dk_methods, nullptr, nullptr, nullptr, nullptr,
};

} // namespace

PyMODINIT_FUNC PyInit__torch_kernel(void) { return PyModuleDef_Init(&dk_module); }
