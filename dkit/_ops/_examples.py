"""Example inputs for the ops' declared example calls (@torch_op(..., example=...)): NumPy arrays
and Python values, made from a NumPy Generator. Tests read every op's example to run it through
each route (dkit.ops, the torch op, TorchScript, torch.compile, fake tensors) without a list of
ops of their own (Note [The public ops are the declared ones] in dkit/ops.py). NumPy is imported
only when an example is made: `import dkit` imports neither NumPy nor torch."""


def boxes(rng, n, scale=50.0):
    """float32 [n, 4] boxes (x1, y1, x2, y2) with positive sides, and float32 [n] scores."""
    import numpy as np

    b = (rng.random((n, 4)) * scale).astype(np.float32)
    b[:, 2:] += b[:, :2] + 1
    return b, rng.random(n).astype(np.float32)


def rotated(rng, n):
    """float32 [n, 5] rotated boxes (cx, cy, w, h, angle in radians)."""
    import numpy as np

    r = (rng.random((n, 5)) * 20).astype(np.float32)
    r[:, 2:4] += 1
    r[:, 4] /= 10
    return r


def quadri(rng, n):
    """float32 [n, 8] convex quadrilaterals (x1, y1, ..., x4, y4): four points on a circle, in
    angle order."""
    import numpy as np

    centre = rng.random((n, 1, 2)) * 20
    radius = rng.random((n, 1, 1)) * 5 + 1
    angle = np.sort(rng.random((n, 4)) * 2 * np.pi, axis=1)[..., None]
    q = centre + radius * np.concatenate([np.cos(angle), np.sin(angle)], axis=2)
    return q.reshape(n, 8).astype(np.float32)


def feature(rng, n=2, c=3, h=12, w=12):
    """A float32 [n, c, h, w] feature map and three float32 [3, 5] RoIs on it."""
    import numpy as np

    x = rng.random((n, c, h, w)).astype(np.float32)
    rois = np.array([[0, 1, 1, 9, 7], [1, 0.5, 2, 11, 11], [0, 3, 3, 4, 5]], np.float32)
    return x, rois
