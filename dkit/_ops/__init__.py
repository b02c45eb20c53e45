"""dkit's ops, one module per op family, each written once against the framework protocol
(Note [The framework protocol] in dkit/_frameworks/__init__.py):

  roi_align.py   the RoI family: roi_align (roi_pool will join it: same boxes, output sizes and
                 bounds)
  nms.py         the NMS family: nms, batched_nms, soft_nms (outputs sized to a bound plus a
                 count)
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


def torch_op(*schemas, differentiable=False, autocast=False, example=None):
    """Declares the torch op (torch.ops.dkit.<name>) of a public dkit op: its schemas in
    torch's schema language, without the namespace, one per overload. Each schema's arguments
    are the function's own (names, order, defaults), so TorchScript calls the function's
    signature and the function itself serves as the op's kernel; the decorator returns the
    function unchanged (no wrapper frame on the eager path). differentiable: the function
    records autograd (through a Differentiable's fw.apply) when its tensors require grad.
    autocast: under torch.autocast the op runs in float32, as torchvision's (Note [Autocast]).
    example: example(rng) -> the arguments of one typical call (NumPy arrays for tensors,
    dkit/_ops/_examples.py), which the tests run through every route the op has."""

    def declare(fn):
        fn.__dkit_torch_schemas__ = schemas
        fn.__dkit_differentiable__ = differentiable
        fn.__dkit_autocast__ = autocast
        fn.__dkit_example__ = example
        return fn

    return declare


# Note [Autocast]
# Under torch.autocast, torchvision runs roi_align (and roi_pool, ps_roi_*, deform_conv2d) and
# nms in float32: their autocast kernels cast every float16 or bfloat16 argument to float32
# (float64 and integers as they are), compute, and give roi_align's result the input's dtype.
# Mixed-precision training relies on it: float16 features with float32 boxes, or the reverse.
# dkit's eager path does not go through torch's dispatcher (Note [dkit ops in torch] in
# dkit/_torch_library.py), so dkit's ops (those declared @torch_op(..., autocast=True)) do the same
# themselves, at no cost to a call that does not need it:
#   - an op of that list runs as it is whenever it can: with 16-bit tensors of one dtype it
#     already computes in float32 and rounds once at the end, as torchvision's float32 kernel and
#     the cast back do;
#   - when the core refuses the arguments' dtypes (DkitTypeError: float16 features with float32
#     boxes, say), autocast_args() asks the framework how autocast would hand the tensors to a
#     float32 op (fw.autocast: torch.autocast on for their device, else unchanged), and the op
#     runs again on those, its result converted back to the input's dtype as torchvision's is.
#     Without autocast (or when nothing would change), the core's error stands.
# Their torch ops, which TorchScript and torch.compile run, have Autocast kernels instead, as
# torchvision's: every float16 or bfloat16 tensor cast to float32, then the op, then a floating
# result converted to the first tensor's dtype; a tracer records those casts as ops of its graph.


def autocast_args(fw, *tensors):
    """The tensors as autocast hands them to a float32 op (Note [Autocast]), or None when that
    changes none of them (autocast off, or nothing to cast)."""
    cast = tuple(fw.autocast(t) for t in tensors)
    return None if all(c is t for c, t in zip(cast, tensors)) else cast


class Differentiable:
    """An op with a backward, declared once and run by every framework that has autograd
    (fw.apply(op, *args); torch builds one torch.autograd.Function from it), and by torch's own
    autograd as two torch ops (dkit::_<name>_forward, dkit::_<name>_backward: Note [dkit ops
    under torch.compile] in dkit/_torch_library.py). Forward and backward are plain functions of
    their arguments, with no context object, so that each can be a torch op:

        forward(fw, *args) -> tuple of tensors: the op's results, then whatever only its
            backward reads (roi_align: output, argmax_y, argmax_x)
        saved(args, results) -> tuple: what backward takes after the gradients, from forward's
            arguments and all its results: tensors, shapes, ints, floats, bools (roi_align:
            rois, the argmax, input's shape and the scalars). Never forward's input tensors
            themselves unless backward reads their values: keeping them alive costs memory.
        backward(fw, *grads, *saved) -> tuple of gradients of forward's leading arguments, one
            per result the caller sees (None where a gradient is all zeros)
        results: how many of forward's results the caller sees (the rest are for backward)
        forward_schema, backward_schema: forward's and backward's torch schemas without a name,
            "(Tensor input, ..., int aligned) -> (Tensor, Tensor, Tensor)": their torch ops'.

    `fw` is the framework module. title names the autograd nodes (torch: <title>FunctionBackward
    in grad_fn). dkit/_torch_library.py registers the torch ops of every Differentiable found
    in the modules of dkit.ops' functions.
    """

    __slots__ = ("name", "title", "forward", "saved", "backward", "results", "forward_schema", "backward_schema")

    def __init__(self, name, title, forward, saved, backward, results, forward_schema, backward_schema):
        self.name = name
        self.title = title
        self.forward = forward
        self.saved = saved
        self.backward = backward
        self.results = results
        self.forward_schema = forward_schema
        self.backward_schema = backward_schema

    def __repr__(self):
        return f"<dkit op {self.name}>"
