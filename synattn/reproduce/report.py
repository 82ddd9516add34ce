"""The results of a study: the markdown table, ``results.json`` and the plots."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

from synattn.io import atomic_write
from synattn.reproduce.stats import paired_difference, summarize

if TYPE_CHECKING:  # the study calls this module for its default table and plots
    from synattn.reproduce.study import Budget, Context, Study


def _values(runs: dict[int, dict], key: str) -> dict[int, float]:
    return {seed: float(m[key]) for seed, m in runs.items() if m.get(key) is not None}


def summaries(study: Study, metrics: dict[str, dict[int, dict]]) -> dict:
    """Per arm and metric: mean ± std over seeds, and the seed-paired difference to the baseline."""
    baseline = next(iter(metrics))
    keys = sorted({k for runs in metrics.values() for m in runs.values() for k in m
                   if isinstance(m[k], (int, float)) and not isinstance(m[k], bool)})
    out: dict = {}
    for arm, runs in metrics.items():
        out[arm] = {}
        for key in keys:
            values = _values(runs, key)
            entry = {"summary": summarize(list(values.values())).to_dict()}
            if arm != baseline:
                entry["vs_baseline"] = paired_difference(values, _values(metrics[baseline], key)).to_dict()
            out[arm][key] = entry
    return out


COUNTS = ("train_step", "sentences")
"""Metrics that count (updates, sentences): whole numbers, not scaled."""


def default_table(study: Study, metrics: dict[str, dict[int, dict]]) -> str:
    """Arms as rows, the study's columns as mean ± std over seeds, then the primary metric's
    seed-paired difference to the baseline (the first arm)."""
    baseline = next(iter(metrics))
    arms = {a.name: a for a in study.known_arms()}
    columns = [(key, title) for key, title in study.columns
               if any(m.get(key) is not None for runs in metrics.values() for m in runs.values())]
    head = ["arm", "seeds"] + [title for _, title in columns]
    if study.primary:
        head.append(f"Δ {dict(study.columns).get(study.primary, study.primary)} vs {baseline}")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for arm, runs in metrics.items():
        row = [f"`{arm}`", str(len(runs))]
        for key, _ in columns:
            counts = key in COUNTS  # updates: a whole number (a mean over seeds keeps one decimal)
            row.append(summarize(list(_values(runs, key).values())).format(1 if len(runs) > 1 or not counts else 0,
                                                                         1.0 if counts else study.scale))
        if study.primary:
            if arm == baseline:
                row.append("—")
            else:
                diff = paired_difference(_values(runs, study.primary), _values(metrics[baseline], study.primary))
                row.append("–" if diff.n == 0 else (f"{study.scale * diff.mean:+.1f}" + (
                    f" ± {study.scale * diff.std:.1f}" if diff.n > 1 else " (1 seed: no noise estimate)")))
        lines.append("| " + " | ".join(row) + " |")
    legend = [f"- `{name}`: {arms[name].description}" for name in metrics if name in arms]
    return "\n".join(lines + [""] + legend)


def bar_plot(study: Study, metrics: dict[str, dict[int, dict]], path: Path) -> Path:
    """The primary metric per arm: mean over seeds (bar), one dot per seed, ± std (error bar)."""
    from synattn.viz.figure import pyplot, save

    plt = pyplot()
    names = list(metrics)
    fig, ax = plt.subplots(figsize=(max(4.0, 1.1 * len(names) + 1.5), 3.6))
    title = dict(study.columns).get(study.primary, study.primary)
    for i, name in enumerate(names):
        values = [study.scale * v for v in _values(metrics[name], study.primary).values()]
        if not values:
            continue
        s = summarize(values)
        low = min(s.std, s.mean) if min(values) >= 0 else s.std  # scores of 0 and up: no whisker below 0
        ax.bar(i, s.mean, color="#9ecae1" if i else "#bdbdbd",
               yerr=[[low], [s.std]] if s.n > 1 else None, capsize=4)
        ax.scatter([i] * len(values), values, color="black", s=12, zorder=3)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=20, ha="right")
    ax.set_ylabel(title)
    ax.set_title(f"{study.name}: {title} (bars: mean, dots: seeds, whiskers: ± std)", fontsize=9)
    fig.tight_layout()
    return save(fig, path)


def write_results(study: Study, ctx: Context, metrics: dict[str, dict[int, dict]], comparisons: dict,
                  final: bool, budget: Budget | None = None) -> dict:
    """Writes ``results.json`` and ``README.md`` (and, when ``final``, the plots)."""
    results = {"study": study.name, "title": study.title, "question": study.question,
               "complete": final, "arms": {a.name: a.description for a in study.known_arms() if a.name in metrics},
               "runs": {arm: {str(s): m for s, m in runs.items()} for arm, runs in metrics.items()},
               "summaries": summaries(study, metrics), "comparisons": comparisons}
    from synattn.viz.figure import TOY_NOTE, noted

    with noted(TOY_NOTE if ctx.toy else None):  # a toy study's plots say so above their titles
        plots = study.plots(ctx, metrics, ctx.out / "plots") if final else []
    with atomic_write(ctx.out / "results.json") as f:
        json.dump(json_safe(results), f, indent=1, allow_nan=False)
    table = study.table(ctx, metrics, comparisons)
    text = [f"# {study.name}: {study.title}", "", study.question, ""]
    if ctx.toy:
        text += ["**Toy run** (`--toy`): tiny data, model and budget, a smoke test of the pipeline; its numbers "
                 "say nothing about the methods.", ""]
    elif budget is not None and budget.updates is None:
        text += [f"Budget: {budget} per run (`train_step` in `results.json`: the updates "
                 "each made).", ""]
    elif budget is not None:
        text += [f"Budget: {budget} per run, the learning-rate schedule's length (`train_minutes` in "
                 "`results.json`: the time each took).", ""]
    text += [table, ""]
    if not final:
        text.append("*(partial: not every run is trained and scored yet; the command in `commands.sh` continues it)*\n")
    text += [f"![{p.stem}](plots/{p.name})" for p in plots]
    text += ["", "Exact configs: `configs/`; commands: `commands.sh`; every number: `results.json`."]
    with atomic_write(ctx.out / "README.md") as f:
        f.write("\n".join(text) + "\n")
    return results


def json_safe(value):
    """``value`` as strict JSON holds it: NaN and infinities as ``null`` (JSON has neither; Python
    would write bare ``NaN``), numpy scalars as numbers, paths as strings."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise TypeError(f"cannot write {type(value).__name__} to JSON")
