"""dkit's ops, one module per op family, each written once against the framework protocol
(Note [The framework protocol] in dkit/_frameworks/__init__.py):

  roi_align.py   the RoI family: roi_align (roi_pool will join it: same boxes, output sizes and
                 bounds)
  nms.py         the NMS family: nms, batched_nms (outputs sized to a bound plus a count)
  rotated.py     rotated boxes (cx, cy, w, h, angle): box_iou_rotated, nms_rotated (MMCV's)
  box_iou.py     the box-overlap family: box_iou, generalized / distance / complete IoU
                 (torchvision) and bbox_overlaps (MMCV), one core op with a kind
  _args.py       argument normalisation every op shares (ints, floats, bools, pairs)

An op module holds everything about its ops that is not the kernel: argument normalisation,
bounds, output shapes and dtypes, and the forward/backward pair. dkit.ops re-exports the public
functions; dkit.nn and dkit.compat call the same ones. Each public function also declares, with
@torch_op, the torch op that serves it where torch runs it itself (Note [dkit ops in torch] in
dkit/_torch_library.py).
"""


def torch_op(*schemas):
    """Declares the torch op (torch.ops.dkit.<name>) of a public dkit op: its schemas in
    torch's schema language, without the namespace, one per overload. Each schema's arguments
    are the function's own (names, order, defaults), so TorchScript calls the function's
    signature and the function itself serves as the op's kernel; the decorator returns the
    function unchanged (no wrapper frame on the eager path)."""

    def declare(fn):
        fn.__dkit_torch_schemas__ = schemas
        return fn

    return declare


# Note [Autocast]
# Under torch.autocast, torchvision runs roi_align (and roi_pool, ps_roi_*, deform_conv2d) and
# nms in float32: their autocast kernels cast every float16 or bfloat16 argument to float32
# (float64 and integers as they are), compute, and give roi_align's result the input's dtype.
# Mixed-precision training relies on it: float16 features with float32 boxes, or the reverse. The
# torch ops that dkit's ops would be in torch's dispatcher are not on dkit's eager path (Note
# [dkit ops in torch] in dkit/_torch_library.py), so dkit's ops do the same themselves, at no cost
# to a call that does not need it:
#   - an op of that list runs as it is whenever it can: with 16-bit tensors of one dtype it
#     already computes in float32 and rounds once at the end, as torchvision's float32 kernel and
#     the cast back do;
#   - when the core refuses the arguments' dtypes (DkitTypeError: float16 features with float32
#     boxes, say), autocast_args() asks the framework how autocast would hand the tensors to a
#     float32 op (fw.autocast: torch.autocast on for their device, else unchanged), and the op
#     runs again on those, its result converted back to the input's dtype as torchvision's is.
#     Without autocast (or when nothing would change), the core's error stands.
# The torch ops' kernels are these same functions (torch.ops.dkit.roi_align under autocast, and
# scripted models, behave the same way).


def autocast_args(fw, *tensors):
    """The tensors as autocast hands them to a float32 op (Note [Autocast]), or None when that
    changes none of them (autocast off, or nothing to cast)."""
    cast = tuple(fw.autocast(t) for t in tensors)
    return None if all(c is t for c, t in zip(cast, tensors)) else cast


class Differentiable:
    """An op with a backward, declared once and run by every framework that has autograd
    (fw.apply(op, *args); torch builds one torch.autograd.Function from it).

        forward(ctx, fw, *args) -> output(s)
        backward(ctx, fw, *grad_outputs) -> tuple of gradients of the leading args

    ctx is None when no backward will follow (frameworks without autograd, inputs that do not
    require grad, no-grad mode): forward then saves nothing. Otherwise ctx is the framework's
    autograd context, with torch.autograd.Function's interface: save_for_backward(*tensors),
    saved_tensors, and free attributes (name them dkit_*). backward returns one gradient per
    leading argument of forward (None where there is none); the remaining arguments (sizes,
    modes, ...) get None. `fw` is the framework module.

    title names the autograd nodes (torch: <title>FunctionBackward in grad_fn).
    """

    __slots__ = ("name", "title", "forward", "backward")

    def __init__(self, name, title, forward, backward):
        self.name = name
        self.title = title
        self.forward = forward
        self.backward = backward

    def __repr__(self):
        return f"<dkit op {self.name}>"
