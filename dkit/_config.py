"""dkit.show_config(): what this dkit was built with and can run on."""

import sys


def config():
    """The build/runtime configuration as a dict (no printing)."""
    from dkit import _C, __version__, _paths

    cfg = dict(_C.config())
    cfg.setdefault("version", __version__)
    cfg["python"] = sys.version.split()[0]
    cfg["backends_loaded"] = [b[0] for b in _C.backends()]
    from dkit.dispatch import backends  # GPU backends: what each was built for

    cfg["gpu_archs"] = {b.name: b.build for b in backends() if b.build}
    cfg["include"] = _paths.get_include()
    cfg["library"] = _paths.get_library()
    # Report the frameworks already imported; importing torch here would cost a second.
    for mod in ("numpy", "torch"):
        m = sys.modules.get(mod)
        if m is not None:
            cfg[mod] = getattr(m, "__version__", "?")
    if "torch" in sys.modules:  # Note [torch reader] in csrc/python/dk_pytorch.h
        cfg["torch_reader"] = _C._torch_reader()
    bridge = sys.modules.get("dkit._torch_library")  # Note [dkit ops in torch]
    if bridge is not None:
        if bridge._holder_impl is not None:
            holder = "dkit._torch_kernel"
        else:
            holder = "torch.library (terse errors in TorchScript)"
        n = len(bridge._core_done) + len(bridge._public_done)
        cfg["torch_ops"] = f"{n} ops as torch.ops.dkit.*, kernels by {holder}"
    return cfg


_ORDER = ("version", "abi", "compiler", "openmp", "openmp_max_threads", "num_threads", "backends", "gpu_archs")


def show_config(file=None):
    """Print the configuration (version, compiler, OpenMP threads, backends built, GPU
    architectures, ...) and return it as a dict."""
    cfg = config()
    keys = [k for k in _ORDER if k in cfg] + [k for k in cfg if k not in _ORDER]
    width = max(len(k) for k in keys)
    lines = ["dkit configuration:"]
    for k in keys:
        v = cfg[k]
        if isinstance(v, dict):
            v = "; ".join(f"{name}: {x}" for name, x in v.items()) if v else "(none)"
        elif isinstance(v, (list, tuple)):
            v = ", ".join(map(str, v)) if v else "(none)"
        lines.append(f"  {k:<{width}}  {v}")
    print("\n".join(lines), file=file if file is not None else sys.stdout)
    return cfg
