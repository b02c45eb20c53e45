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
 * holder fetches the error into the python_error it throws and builds what() itself (Note
 * [Kernel errors under TorchScript]), so that what() is the message ("rois[0] has
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

#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

/* Note [Kernel errors under TorchScript]
 * What TorchScript shows of a kernel's exception is python_error::what() alone, as a
 * RuntimeError. torch's own python_error::build_message() leaves "python_error" there when str()
 * of the exception raises or is not valid UTF-8 (a lone surrogate), and "" for an exception
 * without arguments (KeyboardInterrupt()), so the message is built here instead: str() of the
 * exception, its non-UTF-8 characters escaped; prefixed with the exception's type name when it
 * is not a RuntimeError (every dkit error is one, and its message already names the op), so
 * that a KeyboardInterrupt or a ValueError stays recognisable in a RuntimeError; the type name
 * alone when str() is empty or fails. Eager callers get the original exception object either
 * way (torch restores it). */
std::string dk_message(PyObject *type, PyObject *value)
{
    std::string text;
    bool ok = false;
    PyObject *str = value ? PyObject_Str(value) : nullptr;
    if (str) {
        PyObject *bytes = PyUnicode_AsEncodedString(str, "utf-8", "backslashreplace");
        if (bytes) {
            text.assign(PyBytes_AS_STRING(bytes), static_cast<size_t>(PyBytes_GET_SIZE(bytes)));
            ok = true;
            Py_DECREF(bytes);
        }
        Py_DECREF(str);
    }
    PyErr_Clear(); /* whatever str() or the encoding raised */
    const char *name = (type && PyExceptionClass_Check(type)) ? PyExceptionClass_Name(type) : "exception";
    const char *dot = strrchr(name, '.');
    std::string tname = dot ? dot + 1 : name;
    if (!ok) return tname + " (str() of the exception failed)";
    if (text.empty()) return tname;
    if (type && PyErr_GivenExceptionMatches(type, PyExc_RuntimeError)) return text;
    return tname + ": " + text;
}

/* The Python error now set, as a python_error whose what() is its message (Note [Why dkit has
 * its own kernel holder], Note [Kernel errors under TorchScript]). GIL held. */
[[noreturn]] void dk_throw_python_error()
{
    python_error e;
    PyErr_Fetch(&e.type, &e.value, &e.traceback);
    PyErr_NormalizeException(&e.type, &e.value, &e.traceback);
    if (e.traceback && e.value) PyException_SetTraceback(e.value, e.traceback);
    e.message = dk_message(e.type, e.value);
    throw e;
}

/* Note [Checked kernel results]
 * torch's converters take more than they should from a kernel's result: None becomes an
 * undefined Tensor (which later code reads as a tensor), and a tensor or any iterable becomes a
 * tuple of its elements (a tensor of two rows "is" a pair of tensors). A kernel that returns the
 * wrong thing must fail at the op, naming it, so a result has exactly the schema's shape: one
 * value per return, a tuple of exactly that many for several, None only where the schema
 * allows it. GIL held. */
[[noreturn]] void dk_bad_result(const c10::FunctionSchema &schema, PyObject *result, const char *why)
{
    std::string expected;
    for (size_t i = 0; i < schema.returns().size(); i++) {
        if (i) expected += ", ";
        expected += schema.returns()[i].type()->str();
    }
    if (schema.returns().size() != 1) expected = "(" + expected + ")";
    PyErr_Format(PyExc_TypeError, "%s: the kernel returned %s%s, expected %s", schema.name().c_str(),
                 Py_TYPE(result)->tp_name, why, expected.c_str());
    dk_throw_python_error();
}

c10::IValue dk_to_ivalue(const c10::FunctionSchema &schema, PyObject *value, const c10::TypePtr &type)
{
    if (value == Py_None && type->kind() != c10::TypeKind::OptionalType && type->kind() != c10::TypeKind::NoneType)
        dk_bad_result(schema, value, "");
    try {
        return torch::jit::toIValue(pybind11::handle(value), type);
    } catch (const pybind11::error_already_set &) {
        throw; /* a Python error, which torch translates */
    } catch (const std::exception &e) {
        dk_bad_result(schema, value, (std::string(" (") + e.what() + ")").c_str());
    }
}

/* Note [Outputs written in place]
 * A .out op writes its Tensor(a!) arguments in place, which torch's autograd must learn of, as
 * it does for its own out= and in-place ops (their ADInplaceOrView kernels): each written tensor's
 * version is bumped, so that a tensor saved for a backward and overwritten since makes that
 * backward fail ("modified by an inplace operation") instead of computing a wrong gradient from
 * the new values, and an inference tensor is refused outside inference mode, with torch's own
 * error. Bumped before the kernel runs, so that a refused output is left as it was. */
void dk_bump_versions(const c10::FunctionSchema &schema, const std::vector<c10::IValue> &args)
{
    const auto &arguments = schema.arguments();
    for (size_t i = 0; i < args.size() && i < arguments.size(); i++) {
        const c10::AliasInfo *alias = arguments[i].alias_info();
        if (alias && alias->isWrite() && args[i].isTensor() && args[i].toTensor().defined())
            args[i].toTensor().unsafeGetTensorImpl()->bump_version();
    }
}

class dk_kernel_holder final : public c10::OperatorKernel {
  public:
    explicit dk_kernel_holder(PyObject *fn) : fn_(fn) { Py_INCREF(fn); } /* never released */

    void operator()(const c10::OperatorHandle &op, c10::DispatchKeySet, torch::jit::Stack *stack)
    {
        const c10::FunctionSchema &schema = op.schema();
        std::vector<c10::IValue> args = torch::jit::pop(*stack, schema.arguments().size());
        dk_bump_versions(schema, args);
        pybind11::gil_scoped_acquire gil;
        PyObject *tuple = PyTuple_New(static_cast<Py_ssize_t>(args.size()));
        if (!tuple) dk_throw_python_error();
        for (size_t i = 0; i < args.size(); i++) {
            pybind11::object value = torch::jit::toPyObject(std::move(args[i]));
            PyTuple_SET_ITEM(tuple, static_cast<Py_ssize_t>(i), value.release().ptr());
        }
        PyObject *out = PyObject_Call(fn_, tuple, nullptr);
        Py_DECREF(tuple);
        if (!out) dk_throw_python_error(); /* Note [Why dkit has its own kernel holder] */
        pybind11::object result = pybind11::reinterpret_steal<pybind11::object>(out);
        const auto &returns = schema.returns();
        if (returns.size() == 1) {
            torch::jit::push(stack, dk_to_ivalue(schema, out, returns[0].type()));
        } else if (returns.empty()) {
            if (out != Py_None) dk_bad_result(schema, out, "");
        } else { /* Note [Checked kernel results] */
            if (!PyTuple_Check(out)) dk_bad_result(schema, out, "");
            if (static_cast<size_t>(PyTuple_GET_SIZE(out)) != returns.size()) {
                std::string why = " of " + std::to_string(PyTuple_GET_SIZE(out)) + " values";
                dk_bad_result(schema, out, why.c_str());
            }
            for (size_t i = 0; i < returns.size(); i++)
                torch::jit::push(
                    stack, dk_to_ivalue(schema, PyTuple_GET_ITEM(out, static_cast<Py_ssize_t>(i)), returns[i].type()));
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
        lib->impl(name, torch::dispatch(c10::parseDispatchKey(key), torch::CppFunction::makeFromBoxedFunctor(
                                                                        std::make_unique<dk_kernel_holder>(fn))));
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

/* pybind11 (which torch's converters and python_error use inside this module) sets up its
 * per-module state on first use, and gil_scoped_acquire reads it before it takes the GIL: two
 * threads entering their first kernel at once (TorchScript runs without the GIL) would race on
 * that first write (ThreadSanitizer found it). So it is set up here, at import, with the GIL
 * held; afterwards every kernel only reads it. */
int dk_exec(PyObject *)
{
    try {
        (void)pybind11::detail::get_internals();
    } catch (const std::exception &e) {
        PyErr_SetString(PyExc_ImportError, e.what());
        return -1;
    }
    return 0;
}

PyModuleDef_Slot dk_slots[] = {
    {Py_mod_exec, reinterpret_cast<void *>(dk_exec)},
    {0, nullptr},
};

PyModuleDef dk_module = {
    PyModuleDef_HEAD_INIT,
    "dkit._torch_kernel",
    "Python callables as torch kernels whose errors keep their messages.",
    0,
    dk_methods,
    dk_slots,
    nullptr,
    nullptr,
    nullptr,
};

} // namespace

PyMODINIT_FUNC PyInit__torch_kernel(void) { return PyModuleDef_Init(&dk_module); }
