"""Triton kernels of :mod:`synattn.structs`: the dynamic programs in a handful of launches on a GPU.

The PyTorch path of a dynamic program runs one Python step per span width or position, each a few
kernel launches over the whole batch; on a GPU such a call is bound by the launches, not the
arithmetic. The kernels here run **one program per sentence with the loop over widths (or
positions) inside the kernel**: the charts live in global memory in ``O(B·N²)`` scratch, each width
is computed in tiles of spans × split points with an online log-sum-exp, and
``tl.debug_barrier()`` separates a width from the next (every program is one thread block, so its
global writes are visible to its own threads after the barrier). A call is then a fixed number of
launches whatever ``N`` (``benchmarks/bench_structs.py --launches`` counts them).

Each kernel module also holds the ``torch.autograd.Function`` s that run it, so the kernels are
differentiable like every other backend (:mod:`synattn.structs.registry` tests them against the
reference). Marginals come from an explicit outside pass in log space; their backward (the
Hessian-vector product) from the same passes on dual numbers, as the numba kernels do.

The modules import ``triton`` at the top and are imported only when the ``triton`` backend runs
(:func:`synattn.structs.backend.use_triton`). With ``TRITON_INTERPRET=1`` set before that import,
Triton's interpreter runs the same kernels on CPU tensors: that is how the tests check them on
machines without a GPU.
"""
