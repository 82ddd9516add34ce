"""The rows of ``bench_structs.py --only ...`` beyond the main table (semi-Markov, labelled arcs and
spans, second order, SentCFG, autoregressive decoding, sampling and k-best, supar's approximate
inference), each against the peers that have the structure; the alignment rows are in
``structs_alignment.py``.
"""

from __future__ import annotations

import torch

from synattn.structs import DependencyCRF, TreeCRF, convert
from synattn.structs.cky.dp import span_mask
from synattn.structs.dependency.arc_scores import usable_arcs

import structs_common as common
from structs_cases import DECODING_SIZES, KBEST, SAMPLES, decoding_fns, on_torch_path, semi_markov_fns
from structs_common import max_diff, median_ms, probe, row


def semi_markov_rows(peers: list[str], sizes, reps: int) -> None:
    """Rows for :class:`SemiMarkovCRF` at ``(B, K, C, N)``, every sequence of length ``N``
    (torch-struct 0.5's log Z is wrong for the longer sequences of a ragged batch)."""
    for batch, K, C, n in sizes:
        gen = torch.Generator().manual_seed(13 * 1000 + n)
        edge = torch.randn(batch, n - 1, K, C, C, generator=gen).to(common.DEVICE)
        lengths = torch.full((batch,), n, device=common.DEVICE)
        libs = ["synattn", "torch path", *(p for p in peers if p == "torch-struct")]
        fns = {lib: semi_markov_fns(lib, edge, lengths) for lib in libs}
        values = {lib: tuple(fn() for fn in pair) for lib, pair in fns.items()}
        times, diffs = {"part": {}, "marg": {}}, {"part": {}, "marg": {}}
        for lib in libs[1:]:
            diffs["part"][lib] = max_diff(values["synattn"][0], values[lib][0])
            diffs["marg"][lib] = max_diff(values["synattn"][1], values[lib][1])
        for which, index in (("part", 0), ("marg", 1)):
            times[which] = median_ms({lib: pair[index] for lib, pair in fns.items()}, reps)
        ours = (times["part"].pop("synattn"), times["marg"].pop("synattn"))
        row(f"semi-Markov log Z B={batch} K={K} C={C} N={n}", ours[0], times["part"], diffs["part"])
        row(f"semi-Markov marg B={batch} K={K} C={C} N={n}", ours[1], times["marg"], diffs["marg"])


def labelled_rows(peers: list[str], reps: int, small: bool) -> None:
    """Labelled projective arcs ``[B, N+1, N+1, R]`` (log Z, labelled marginals) against
    torch-struct's ``DependencyCRF`` on ``[B, N, N, R]`` (equal lengths)."""
    for batch, n, R in [(8, 20, 8)] if small else [(16, 20, 16), (8, 40, 16)]:
        gen = torch.Generator().manual_seed(17 * 1000 + n)
        scores = torch.randn(batch, n + 1, n + 1, R, generator=gen).to(common.DEVICE)
        lengths = torch.full((batch,), n, device=common.DEVICE)
        theirs = convert.arcs_to_torch_struct(scores.permute(3, 0, 1, 2).reshape(-1, n + 1, n + 1))
        theirs = theirs.view(R, batch, n, n).permute(1, 2, 3, 0).contiguous()

        def ours(torch_path=False):
            def part():
                with torch.no_grad():
                    return DependencyCRF(scores, lengths).log_partition

            def marg():
                with torch.no_grad():
                    return DependencyCRF(scores, lengths).marginals
            return on_torch_path((part, marg)) if torch_path else (part, marg)

        def peer():
            import torch_struct

            def part():
                x = theirs.clone().requires_grad_()
                return torch_struct.DependencyCRF(x, lengths).partition.detach()

            def marg():
                x = theirs.clone().requires_grad_()
                mu = torch_struct.DependencyCRF(x, lengths).marginals.detach()  # [B, N, N, R]
                return convert.arcs_from_torch_struct(mu.permute(3, 0, 1, 2).reshape(-1, n, n)
                                                      ).view(R, batch, n + 1, n + 1).permute(1, 2, 3, 0)
            return part, marg
        fns = {"synattn": ours(), "torch path": ours(True)}
        if "torch-struct" in peers:
            fns["torch-struct"] = peer()
        values = {lib: tuple(fn() for fn in pair) for lib, pair in fns.items()}
        times, diffs = {}, {"part": {}, "marg": {}}
        for lib in list(fns)[1:]:
            diffs["part"][lib] = max_diff(values["synattn"][0], values[lib][0])
            diffs["marg"][lib] = max_diff(values["synattn"][1], values[lib][1])
        for which, index in (("part", 0), ("marg", 1)):
            times[which] = median_ms({lib: pair[index] for lib, pair in fns.items()}, reps)
        row(f"labelled Eisner log Z B={batch} N={n} R={R}", times["part"].pop("synattn"),
            times["part"], diffs["part"])
        row(f"labelled Eisner marg B={batch} N={n} R={R}", times["marg"].pop("synattn"),
            times["marg"], diffs["marg"])
    labelled_span_rows(peers, reps, small)


def labelled_span_rows(peers: list[str], reps: int, small: bool) -> None:
    """Labelled spans ``[B, N, N, NT]`` (log Z, labelled marginals, argmax) against torch-struct's
    ``TreeCRF`` on the same scores (ragged lengths; theirs are compared inside the sentences)."""
    for batch, n, NT in [(8, 20, 8)] if small else [(16, 20, 16), (8, 40, 16)]:
        gen = torch.Generator().manual_seed(19 * 1000 + n)
        scores = torch.randn(batch, n, n, NT, generator=gen).to(common.DEVICE)
        lengths = torch.randint(max(1, n // 2), n + 1, (batch,), generator=gen).to(common.DEVICE)
        lengths[0] = n
        within = span_mask(lengths, n).unsqueeze(-1)

        def ours(torch_path=False):
            def part():
                with torch.no_grad():
                    return TreeCRF(scores, lengths).log_partition

            def marg():
                with torch.no_grad():
                    return TreeCRF(scores, lengths).marginals

            def best():
                return TreeCRF(scores, lengths).argmax
            return on_torch_path((part, marg, best)) if torch_path else (part, marg, best)

        def peer():
            import torch_struct

            def part():
                return torch_struct.TreeCRF(scores.clone().requires_grad_(), lengths).partition.detach()

            def marg():
                mu = torch_struct.TreeCRF(scores.clone().requires_grad_(), lengths).marginals
                return mu.detach() * within

            def best():
                return torch_struct.TreeCRF(scores.clone().requires_grad_(), lengths).argmax.detach() * within
            return part, marg, best
        fns = {"synattn": ours(), "torch path": ours(True)}
        if "torch-struct" in peers:
            fns["torch-struct"] = peer()
        values = {lib: tuple(fn() for fn in fns_) for lib, fns_ in fns.items()}
        for which, index in (("log Z", 0), ("marg", 1), ("argmax", 2)):
            diffs = {lib: max_diff(values["synattn"][index], values[lib][index]) for lib in list(fns)[1:]}
            ms = median_ms({lib: fns_[index] for lib, fns_ in fns.items()}, reps)
            row(f"labelled CKY {which} B={batch} N={n} NT={NT}", ms.pop("synattn"), ms, diffs)


def second_order_rows(peers: list[str], reps: int, small: bool) -> None:
    """:class:`Dependency2oCRF` (log Z, arc marginals) against supar's ``Dependency2oCRF``, and
    :class:`DependencyMFVI` / :class:`DependencyLBP` (3 iterations) against supar's modules, on
    the same arc and sibling scores (equal lengths, multiroot)."""
    from synattn.structs import Dependency2oCRF, DependencyLBP, DependencyMFVI

    for batch, n in [(8, 20)] if small else [(16, 20), (8, 40)]:
        gen = torch.Generator().manual_seed(19 * 1000 + n)
        scores = torch.randn(batch, n + 1, n + 1, generator=gen).to(common.DEVICE)
        siblings = torch.randn(batch, n + 1, n + 1, n + 1, generator=gen).to(common.DEVICE)
        lengths = torch.full((batch,), n, device=common.DEVICE)
        s_arc, s_sib = convert.arcs_to_supar(scores), convert.siblings_to_supar(siblings)

        def ours(torch_path=False):
            def part():
                with torch.no_grad():
                    return Dependency2oCRF(scores, siblings, lengths).log_partition

            def marg():
                with torch.no_grad():
                    return Dependency2oCRF(scores, siblings, lengths).marginals
            return on_torch_path((part, marg)) if torch_path else (part, marg)

        def peer():
            from supar.structs import Dependency2oCRF as Supar2o

            def part():
                with torch.no_grad():
                    return Supar2o((s_arc, s_sib), lengths, multiroot=True).log_partition

            def marg():
                x = s_arc.clone().requires_grad_()
                return convert.arcs_from_supar(Supar2o((x, s_sib), lengths, multiroot=True).marginals.detach())
            return part, marg
        fns = {"synattn": ours(), "torch path": ours(True)}
        if "supar" in peers:
            fns["supar"] = peer()
        values = {lib: tuple(fn() for fn in pair) for lib, pair in fns.items()}
        times, diffs = {}, {"part": {}, "marg": {}}
        for lib in list(fns)[1:]:
            diffs["part"][lib] = max_diff(values["synattn"][0], values[lib][0])
            diffs["marg"][lib] = max_diff(values["synattn"][1], values[lib][1])
        for which, index in (("part", 0), ("marg", 1)):
            times[which] = median_ms({lib: pair[index] for lib, pair in fns.items()}, reps)
        row(f"2nd-order Eisner log Z B={batch} N={n}", times["part"].pop("synattn"), times["part"],
            diffs["part"])
        row(f"2nd-order Eisner marg B={batch} N={n}", times["marg"].pop("synattn"), times["marg"],
            diffs["marg"])
        for cls in (DependencyMFVI, DependencyLBP):
            fns = {"synattn": lambda: cls()((scores, siblings), lengths).detach()}
            if "supar" in peers:
                import supar.structs

                pos = torch.arange(n + 1, device=common.DEVICE)
                arc = s_arc.masked_fill(pos[:, None] == pos[None, :], -1e32)  # no self-loops
                sib = s_sib.clone()
                root = 0.0 if cls is DependencyMFVI else -1e32  # no factor with ROOT as a sibling
                sib[:, 0], sib[..., 0] = root, root
                mask = (pos >= 1).expand(batch, n + 1)
                module = getattr(supar.structs, cls.__name__)()
                fns["supar"] = lambda: convert.arcs_from_supar(module((arc, sib), mask).detach())
            diff = {lib: max_diff(fns["synattn"]()[:, :, 1:], fn()[:, :, 1:]) for lib, fn in fns.items()
                    if lib != "synattn"}
            times = median_ms(fns, reps)
            row(f"{cls.__name__[10:]} B={batch} N={n}", times.pop("synattn"), times, diff)


def cfg_rows(peers: list[str], reps: int, small: bool) -> None:
    """SentCFG log Z and marginals against torch-struct's ``SentCFG`` (ragged lengths)."""
    from synattn.structs import SentCFG
    for batch, n, NT, T in [(4, 10, 4, 4)] if small else [(8, 20, 8, 8), (4, 30, 10, 10)]:
        gen = torch.Generator().manual_seed(23 * 1000 + n)
        S = NT + T
        terms = torch.randn(batch, n, T, generator=gen).to(common.DEVICE)
        rules = torch.randn(batch, NT, S, S, generator=gen).to(common.DEVICE)
        roots = torch.randn(batch, NT, generator=gen).to(common.DEVICE)
        lengths = torch.randint(max(2, n // 2), n + 1, (batch,), generator=gen).to(common.DEVICE)
        lengths[0] = n

        def part():
            with torch.no_grad():
                return SentCFG(terms, rules, roots, lengths).log_partition

        def marg():
            return SentCFG(terms, rules, roots, lengths).marginals[1]
        fns = {"synattn": (part, marg)}
        if "torch-struct" in peers:
            import torch_struct

            def peer_part():
                return torch_struct.SentCFG((terms, rules, roots), lengths).partition.detach()

            def peer_marg():
                return torch_struct.SentCFG((terms, rules, roots), lengths).marginals[1].detach()
            fns["torch-struct"] = (peer_part, peer_marg)
        values = {lib: tuple(fn() for fn in pair) for lib, pair in fns.items()}
        times, diffs = {}, {"part": {}, "marg": {}}
        for lib in list(fns)[1:]:
            diffs["part"][lib] = max_diff(values["synattn"][0], values[lib][0])
            diffs["marg"][lib] = max_diff(values["synattn"][1], values[lib][1])
        for which, index in (("part", 0), ("marg", 1)):
            times[which] = median_ms({lib: pair[index] for lib, pair in fns.items()}, reps)
        row(f"SentCFG log Z B={batch} N={n} NT={NT} T={T}", times["part"].pop("synattn"),
            times["part"], diffs["part"])
        row(f"SentCFG marg B={batch} N={n} NT={NT} T={T}", times["marg"].pop("synattn"),
            times["marg"], diffs["marg"])
        decode = {"synattn": (lambda: SentCFG(terms, rules, roots, lengths).sample(SAMPLES),
                              lambda: SentCFG(terms, rules, roots, lengths).kbest(KBEST))}
        if "torch-struct" in peers:
            decode["torch-struct"] = (
                lambda: torch_struct.SentCFG((terms, rules, roots), lengths).sample((SAMPLES,)),
                lambda: torch_struct.SentCFG((terms, rules, roots), lengths).topk(KBEST))
        for which, index in ((f"{SAMPLES} samples", 0), (f"{KBEST}-best", 1)):
            others: dict[str, str] = {}
            runnable = {lib: pair[index] for lib, pair in decode.items()}
            probe({lib: (fn,) for lib, fn in runnable.items()}, others)  # (torch-struct's SentCFG.sample raises)
            ms = median_ms({lib: fn for lib, fn in runnable.items() if lib not in others}, reps, budget_s=60.0)
            row(f"SentCFG {which} B={batch} N={n}", ms.pop("synattn"), {**ms, **others}, {})


def autoregressive_rows(peers: list[str], reps: int, small: bool) -> None:
    """Greedy decoding and beam search (``K = 8``) of a small GRU through ``Autoregressive``
    against torch-struct's ``greedy_max`` / ``beam_topk`` (the same model calls in both)."""
    from synattn.structs import Autoregressive
    torch.manual_seed(0)
    C, H = 50, 32
    emb, cell, out = torch.nn.Embedding(C, H), torch.nn.GRUCell(H, H), torch.nn.Linear(H, C)

    def model(tokens, state):
        h, logits = state[0], []
        for t in range(tokens.shape[1]):
            h = cell(emb(tokens[:, t]), h)
            logits.append(out(h))
        return torch.stack(logits, 1), (h,)
    for batch, n in [(4, 10)] if small else [(16, 20)]:
        init = (torch.randn(batch, H),)
        ours = Autoregressive(model, init, C, n)
        fns = {"synattn": (lambda: ours.greedy()[0], lambda: ours.beam_search(8)[0])}
        fns["torch path"] = on_torch_path(fns["synattn"])  # the beam step's topk in PyTorch
        if "torch-struct" in peers:
            import torch_struct
            peer = torch_struct.Autoregressive(model, init, C, n)
            fns["torch-struct"] = (lambda: peer.greedy_max()[1].detach(),
                                   lambda: peer._beam_max(8).detach())
        for index, what in ((0, "greedy"), (1, "beam K=8")):
            values = {lib: pair[index]() for lib, pair in fns.items()}
            diffs = {lib: max_diff(values["synattn"].double(), v.double().reshape(values["synattn"].shape))
                     for lib, v in values.items() if lib != "synattn" and index == 0}
            times = median_ms({lib: pair[index] for lib, pair in fns.items()}, reps)
            row(f"autoregressive {what} B={batch} N={n} C={C}", times.pop("synattn"), times, diffs)


def decoding_rows(peers: list[str], reps: int) -> None:
    """Rows for ``SAMPLES`` samples and the ``KBEST`` best structures: a peer that lacks the
    operation (raises) is shown as ``n/a``; timings take turns as in :func:`median_ms`."""
    for batch, n in DECODING_SIZES:
        gen = torch.Generator().manual_seed(11 * 1000 + n)
        lengths = torch.randint(max(1, n // 2), n + 1, (batch,), generator=gen)
        lengths[0] = n
        for kind, label in (("eisner", "Eisner"), ("matrix_tree", "Matrix-Tree"), ("cky", "CKY")):
            shape = (batch, n, n) if kind == "cky" else (batch, n + 1, n + 1)
            scores = torch.randn(*shape, generator=gen).to(common.DEVICE)
            fns = {lib: decoding_fns(lib, kind, scores, lengths.to(common.DEVICE)) for lib in ["synattn", *peers]}
            for which, index in ((f"{SAMPLES} samples", 0), (f"{KBEST}-best", 1)):
                others: dict[str, str] = {}
                runnable = {lib: pair[index] for lib, pair in fns.items()}
                probe({lib: (fn,) for lib, fn in runnable.items()}, others)
                ms = median_ms({lib: fn for lib, fn in runnable.items() if lib not in others}, reps,
                               budget_s=60.0)
                ours = ms.pop("synattn")
                row(f"{label} {which} B={batch} N={n}", ours, {**ms, **others}, {})


def vi_rows(peers: list[str], reps: int, small: bool) -> None:
    """:class:`ConstituencyMFVI` / :class:`ConstituencyLBP` (span + span-pair scores) and
    :class:`SemanticDependencyMFVI` / :class:`SemanticDependencyLBP` (edge + sibling, co-parent,
    grandparent scores) against supar's modules, 3 iterations, the same factors (supar's LBP given
    them in the orientation it reads; the graph LBP with sibling factors only, where supar's
    agrees; the work is the same)."""
    from synattn.structs import ConstituencyLBP, ConstituencyMFVI, SemanticDependencyLBP, SemanticDependencyMFVI
    from synattn.structs.cky.dp import span_mask
    from synattn.structs.dependency.semantic_vi import FACTORS, second_arcs

    for batch, n in [(8, 20)] if small else [(16, 20), (8, 40)]:
        gen = torch.Generator().manual_seed(23 * 1000 + n)
        lengths = torch.full((batch,), n, device=common.DEVICE)
        spans = torch.randn(batch, n, n, generator=gen).to(common.DEVICE)
        pairs = torch.randn(batch, n, n, n, generator=gen).to(common.DEVICE)
        usable = span_mask(lengths, n)
        pairs = pairs * (usable.unsqueeze(3) & usable.unsqueeze(2))
        arcs = usable_arcs(lengths, n + 1)
        masks = second_arcs(arcs)
        edges = torch.randn(batch, n + 1, n + 1, generator=gen).to(common.DEVICE)
        weights = [torch.randn(batch, n + 1, n + 1, n + 1, generator=gen).to(common.DEVICE) * masks[name]
                   for name in FACTORS]
        weights[1][:, :, 0] = 0  # ROOT as a co-parent: no factor in supar
        zero = torch.zeros_like(weights[0])
        cases = [(ConstituencyMFVI, (spans, pairs), usable), (ConstituencyLBP, (spans, pairs), usable),
                 (SemanticDependencyMFVI, (edges, *weights), arcs),
                 (SemanticDependencyLBP, (edges, weights[0], zero, zero), arcs)]
        pos = torch.arange(n + 1, device=common.DEVICE)
        fences = (pos[:, None] < pos[None, :]).expand(batch, n + 1, n + 1)
        for cls, scores, keep in cases:
            fns = {"synattn": lambda: cls()(scores, lengths).detach()}
            if "supar" in peers:
                import supar.structs

                module = getattr(supar.structs, cls.__name__)()
                if cls is ConstituencyMFVI:
                    args = (convert.spans_to_supar(spans), convert.span_pairs_to_supar(pairs))
                    fns["supar"] = lambda: convert.spans_from_supar(module(args, fences).detach())
                elif cls is ConstituencyLBP:
                    args = (convert.spans_to_supar(spans).transpose(1, 2),
                            convert.span_pairs_to_supar(pairs).permute(0, 3, 1, 2))
                    fns["supar"] = lambda: convert.spans_from_supar(module(args, fences).detach().transpose(1, 2))
                else:
                    lbp = cls is SemanticDependencyLBP
                    args = (convert.arcs_to_supar(scores[0]),
                            *[convert.siblings_to_supar(w.transpose(2, 3) if lbp else w) for w in scores[1:]])
                    mask = convert.arcs_to_supar(arcs)
                    fns["supar"] = lambda: convert.arcs_from_supar(module(args, mask).detach())
            diff = {lib: max_diff(fns["synattn"]() * keep, fn() * keep) for lib, fn in fns.items()
                    if lib != "synattn"}
            times = median_ms(fns, reps)
            row(f"{cls.__name__} B={batch} N={n}", times.pop("synattn"), times, diff)
