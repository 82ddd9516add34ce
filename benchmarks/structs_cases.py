"""The libraries on the same inputs (layouts: ``synattn.structs.convert``): for each structure, the
functions that ``bench_structs.py`` times, for synattn (its default backend), its PyTorch path and
the peers, torch-struct 0.5 and supar 1.1.4; each returns synattn-layout tensors.
"""

from __future__ import annotations

import torch

from synattn.structs import DependencyCRF, LinearChainCRF, NonProjectiveDependencyCRF, SemiMarkovCRF, TreeCRF, convert
from synattn.structs.backend import use_backend


def on_torch_path(fns):
    """The same functions run with synattn's pure-PyTorch backend."""
    def wrap(fn):
        def run():
            with use_backend("torch"):
                return fn()
        return run
    return tuple(wrap(fn) for fn in fns)


def direction(scores: torch.Tensor) -> torch.Tensor:
    """A fixed random direction ``[B, N+1, N+1]`` for the backward of the marginals."""
    gen = torch.Generator().manual_seed(1)
    return torch.randn(scores.shape, generator=gen).to(scores.device)


def tree_fns(lib: str, kind: str, scores: torch.Tensor, lengths: torch.Tensor):
    """``(partition_fn, marginals_fn, marginals_backward_fn)`` of one library; each returns
    ours-layout tensors (the last: the gradient of ``<marginals, direction(scores)>``)."""
    if lib == "torch path":
        return on_torch_path(tree_fns("synattn", kind, scores, lengths))
    g = direction(scores)
    if lib == "synattn":
        cls = DependencyCRF if kind == "eisner" else NonProjectiveDependencyCRF

        def part():
            with torch.no_grad():
                return cls(scores, lengths, multiroot=True).log_partition

        def marg():
            with torch.no_grad():
                return cls(scores, lengths, multiroot=True).marginals

        def grad():
            x = scores.clone().requires_grad_()
            cls(x, lengths, multiroot=True).marginals.backward(g)
            return x.grad
        return part, marg, grad
    if lib == "torch-struct":
        import torch_struct
        cls = torch_struct.DependencyCRF if kind == "eisner" else torch_struct.NonProjectiveDependencyCRF
        ts_scores, ts_g = convert.arcs_to_torch_struct(scores), convert.arcs_to_torch_struct(g)

        def part():
            x = ts_scores.clone().requires_grad_()
            return cls(x, lengths=lengths, multiroot=True).partition.detach()

        def marg():
            x = ts_scores.clone().requires_grad_()
            marginals = cls(x, lengths=lengths, multiroot=True).marginals.detach()
            return convert.arcs_from_torch_struct(marginals)

        def grad():
            x = ts_scores.clone().requires_grad_()
            cls(x, lengths=lengths, multiroot=True).marginals.backward(ts_g)
            return convert.arcs_from_torch_struct(x.grad)
        return part, marg, grad
    from supar.structs import DependencyCRF as SuparDep, MatrixTree
    cls = SuparDep if kind == "eisner" else MatrixTree
    dep_head, sp_g = convert.arcs_to_supar(scores), convert.arcs_to_supar(g)  # supar: [b, dependent, head]

    def part():
        return cls(dep_head.clone(), lengths, multiroot=True).log_partition.detach()

    def marg():
        marginals = cls(dep_head.clone(), lengths, multiroot=True).marginals.detach()
        return convert.arcs_from_supar(marginals)

    def grad():
        x = dep_head.clone().requires_grad_()
        cls(x, lengths, multiroot=True).marginals.backward(sp_g)
        return convert.arcs_from_supar(x.grad)
    return part, marg, grad


def span_fns(lib: str, scores: torch.Tensor, lengths: torch.Tensor):
    """``(partition_fn, marginals_fn)`` of the constituency CRFs (CKY), ours-layout results."""
    if lib == "torch path":
        return on_torch_path(span_fns("synattn", scores, lengths))
    if lib == "synattn":
        def part():
            with torch.no_grad():
                return TreeCRF(scores, lengths).log_partition

        def marg():
            with torch.no_grad():
                return TreeCRF(scores, lengths).marginals
        return part, marg
    if lib == "torch-struct":
        import torch_struct
        ts_scores = convert.spans_to_torch_struct(scores)  # [B, N, N, 1]

        def part():
            x = ts_scores.clone().requires_grad_()
            return torch_struct.TreeCRF(x, lengths=lengths).partition.detach()

        def marg():
            x = ts_scores.clone().requires_grad_()
            mu = torch_struct.TreeCRF(x, lengths=lengths).marginals.detach()
            return convert.span_marginals_from_torch_struct(mu)
        return part, marg
    from supar.structs import ConstituencyCRF
    fenceposts = convert.spans_to_supar(scores)  # [B, N+1, N+1]

    def part():
        return ConstituencyCRF(fenceposts.clone().requires_grad_(), lengths).log_partition.detach()

    def marg():
        x = fenceposts.clone().requires_grad_()
        return convert.spans_from_supar(ConstituencyCRF(x, lengths).marginals.detach())
    return part, marg


def chain_fns(lib: str, unary: torch.Tensor, trans: torch.Tensor, lengths: torch.Tensor):
    """``(partition_fn, node_marginals_fn)``; the chain scores unary[i, y_i] + trans[y_i, y_{i+1}]."""
    if lib == "torch path":
        return on_torch_path(chain_fns("synattn", unary, trans, lengths))
    if lib == "synattn":
        def part():
            with torch.no_grad():
                return LinearChainCRF(unary=unary, transition=trans, lengths=lengths).log_partition

        def marg():
            with torch.no_grad():
                return LinearChainCRF(unary=unary, transition=trans, lengths=lengths).marginals
        return part, marg
    if lib == "torch-struct":
        import torch_struct
        edge = trans + unary[:, 1:, None, :]  # [B, N-1, C(prev), C(next)]
        edge[:, 0] += unary[:, 0, :, None]
        edge = edge.transpose(-1, -2).contiguous()  # torch-struct: phi(n, z_{n+1}, z_n)

        def part():
            x = edge.clone().requires_grad_()
            return torch_struct.LinearChainCRF(x, lengths=lengths).partition.detach()

        def marg():  # edge marginals, summed to node marginals
            x = edge.clone().requires_grad_()
            m = torch_struct.LinearChainCRF(x, lengths=lengths).marginals.detach()  # [B, N-1, next, prev]
            first = m[:, :1].sum(-2)
            return torch.cat((first, m.sum(-1)), 1)
        return part, marg
    from supar.structs import LinearChainCRF as SuparChain
    C = unary.shape[-1]
    full = unary.new_zeros(C + 1, C + 1)  # supar adds start/end transitions: zero here
    full[:C, :C] = trans

    def part():
        return SuparChain(unary.clone(), full, lengths).log_partition.detach()

    def marg():
        return SuparChain(unary.clone(), full, lengths).marginals.detach()
    return part, marg


def semi_markov_fns(lib: str, edge: torch.Tensor, lengths: torch.Tensor):
    """``(partition_fn, marginals_fn)`` of the semi-Markov CRF (torch-struct only: supar has none)."""
    if lib == "torch path":
        return on_torch_path(semi_markov_fns("synattn", edge, lengths))
    if lib == "synattn":
        def part():
            with torch.no_grad():
                return SemiMarkovCRF(edge, lengths).log_partition

        def marg():
            with torch.no_grad():
                return SemiMarkovCRF(edge, lengths).marginals
        return part, marg
    if lib == "torch-struct":
        import torch_struct
        theirs = convert.semi_markov_to_torch_struct(edge)

        def part():
            x = theirs.clone().requires_grad_()
            return torch_struct.SemiMarkovCRF(x, lengths=lengths).partition.detach()

        def marg():
            x = theirs.clone().requires_grad_()
            mu = torch_struct.SemiMarkovCRF(x, lengths=lengths).marginals.detach()
            return convert.semi_markov_from_torch_struct(mu)
        return part, marg
    raise NotImplementedError("supar has no semi-Markov CRF")


# ---------------------------------------------------------------------------------------------
# Sampling and k-best.
# ---------------------------------------------------------------------------------------------

SAMPLES = 32
KBEST = 8
DECODING_SIZES = [(16, 20)]


def decoding_fns(lib: str, kind: str, scores: torch.Tensor, lengths: torch.Tensor):
    """``(sample_fn, kbest_fn)`` of one library (``None`` where it has none): ``SAMPLES`` exact
    samples and the ``KBEST`` best structures. supar draws one sample per call (so ``SAMPLES``
    calls); its ``topk`` exists for some structures only."""
    if lib == "synattn":
        def make():
            if kind == "cky":
                return TreeCRF(scores, lengths)
            cls = {"eisner": DependencyCRF, "matrix_tree": NonProjectiveDependencyCRF}[kind]
            return cls(scores, lengths, multiroot=True)
        return (lambda: make().sample(SAMPLES)), (lambda: make().kbest(KBEST))
    if lib == "torch-struct":
        import torch_struct
        if kind == "cky":
            x = convert.spans_to_torch_struct(scores)
            make = lambda: torch_struct.TreeCRF(x.clone().requires_grad_(), lengths=lengths)  # noqa: E731
        else:
            cls = torch_struct.DependencyCRF if kind == "eisner" else torch_struct.NonProjectiveDependencyCRF
            x = convert.arcs_to_torch_struct(scores)
            make = lambda: cls(x.clone().requires_grad_(), lengths=lengths, multiroot=True)  # noqa: E731
        return (lambda: make().sample((SAMPLES,))), (lambda: make().topk(KBEST))
    from supar.structs import ConstituencyCRF, DependencyCRF as SuparDep, MatrixTree
    if kind == "cky":
        x = convert.spans_to_supar(scores)
        make = lambda: ConstituencyCRF(x.clone().requires_grad_(), lengths)  # noqa: E731
    else:
        cls = SuparDep if kind == "eisner" else MatrixTree
        x = convert.arcs_to_supar(scores)
        make = lambda: cls(x.clone().requires_grad_(), lengths, multiroot=True)  # noqa: E731
    return (lambda: [make().sample() for _ in range(SAMPLES)]), (lambda: make().topk(KBEST))
