"""PNG plots of `rag eval` reports, drawn with matplotlib (the optional
`plot` extra: `pip install rag-cli[plot]`), chosen by the report's keys:

* a metric report: metric@k curves (one line per metric, k on a log axis);
* a comparison: per-query differences (run - baseline) of nDCG@10 (else
  the first nDCG@k, else the first metric), sorted, one PNG per run;
* a funnel: where the gold first goes missing, queries per layer;
* a tuning report: the train score of every grid setting;
* a perturbation report: the loss of each change, per metric.

Files are written atomically as DIR/NAME-KIND.png (150 dpi); `plot_report`
returns their paths. Raises BadInput when matplotlib is not installed.
"""

from __future__ import annotations

from pathlib import Path

from rag_cli import atomic
from rag_cli.errors import BadInput


def check_matplotlib():
    """The matplotlib module (its Agg backend chosen); BadInput when it does not import."""
    try:
        import matplotlib
    except ImportError:
        raise BadInput("--plots needs matplotlib: pip install 'rag-cli[plot]' (or pip install matplotlib)") from None
    matplotlib.use("Agg")
    return matplotlib


def _pyplot():
    check_matplotlib()
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> Path:
    import io

    import warnings

    buf = io.BytesIO()
    with warnings.catch_warnings():  # "Tight layout not applied" is matplotlib's to say, not ours to print
        warnings.simplefilter("ignore", UserWarning)
        fig.tight_layout()
    fig.savefig(buf, format="png", dpi=150, bbox_inches="tight")
    atomic.write_bytes(path, buf.getvalue())
    return path


def _metric_curves(plt, report: dict, path: Path) -> Path:
    means = report["metrics"]
    fig, ax = plt.subplots(figsize=(6, 4))
    styles = [("o", "-"), ("s", "--"), ("^", "-."), ("D", ":"), ("v", "-"), ("x", "--")]
    for i, name in enumerate(dict.fromkeys(m.split("@")[0] for m in means if "@" in m)):
        ks = sorted(int(m.split("@")[1]) for m in means if m.startswith(name + "@"))
        marker, line = styles[i % len(styles)]
        ax.plot(ks, [means[f"{name}@{k}"] for k in ks], marker=marker, linestyle=line, label=name, alpha=0.85)
    ks = sorted({int(m.split("@")[1]) for m in means if "@" in m})
    ax.set_xscale("log")
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.minorticks_off()
    ax.set_xlabel("cutoff k (documents)")
    ax.set_ylabel("mean over queries")
    ax.set_ylim(0, 1.02)
    ax.set_title(f"metric@k, {report['n_queries']} queries")
    ax.grid(alpha=0.3)
    ax.legend()
    return _save(fig, path)


def _differences(plt, report: dict, comp: dict, path: Path) -> Path:
    names = list(comp["metrics"])
    metric = "ndcg@10" if "ndcg@10" in names else next((m for m in names if m.startswith("ndcg@")), names[0])
    diffs = sorted(v[metric] for v in comp["per_query"].values())
    r = comp["metrics"][metric]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.bar(range(len(diffs)), diffs, width=1.0,
           color=["tab:red" if d < 0 else "tab:green" if d > 0 else "tab:gray" for d in diffs])
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xlim(-0.5, len(diffs) - 0.5)
    ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
    ax.set_xlabel("queries, sorted by difference (ties are the gap at 0)")
    ax.set_ylabel(f"{metric}: {comp['run']} - {comp['baseline']}")
    ax.set_title(f"{metric}: mean {r['mean_diff']:+.4f}, W/T/L {r['wins']}/{r['ties']}/{r['losses']}, "
                 f"p {r['p_randomisation_holm']:.3g}")
    return _save(fig, path)


def _funnel(plt, report: dict, path: Path) -> Path:
    counts = report["counts"]["first_missing"]
    measured = set(report.get("layers_measured", counts)) | {"retrieval", "none"}
    layers = [x for x in counts if x in measured or (x == "citation" and "cited" in measured)]
    names = {"retrieval": "in neither candidate list", "none": "reached the last layer"}
    labels = [names.get(x, f"lost in {x}") for x in layers][::-1]
    values = [counts[x] for x in layers][::-1]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.barh(labels, values, color=["tab:green" if x == "none" else "tab:red" for x in layers][::-1])
    for i, v in enumerate(values):
        ax.text(v, i, f" {v}", va="center")
    ax.set_xlabel("queries")
    ax.set_title(f"where the gold first goes missing ({report['n_queries']} queries)")
    return _save(fig, path)


def _tuning(plt, report: dict, path: Path) -> Path:
    grid = report["grid"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 4), sharey=True)
    rrf = [g for g in grid if g["fusion"] == "rrf"]
    a.plot([g["rrf_k"] for g in rrf], [g["train"] for g in rrf], marker="o")
    a.set_xlabel("RRF k")
    a.set_ylabel(f"{report['metric']} (train)")
    for method in ("minmax", "zscore"):
        pts = [g for g in grid if g["fusion"] == method]
        b.plot([g["dense_weight"] for g in pts], [g["train"] for g in pts], marker="o", label=method)
    b.set_xlabel("dense weight (0 = BM25 only, 1 = dense only)")
    b.legend()
    for ax in (a, b):
        ax.grid(alpha=0.3)
    fig.suptitle("fusion grid on the train split")
    return _save(fig, path)


def _perturb_metrics(names: list[str]) -> list[str]:
    """The metrics a perturbation plot shows: each cutoff metric at one k (10
    when measured, else the largest k under 10, else the smallest), then the
    whole-run metrics; at most one bar per metric family."""
    ks = sorted({int(m.split("@")[1]) for m in names if "@" in m})
    if not ks:
        return names
    k = 10 if 10 in ks else max((x for x in ks if x < 10), default=ks[0])
    return [m for m in names if m.endswith(f"@{k}")] + [m for m in names if "@" not in m]


def _perturb(plt, report: dict, path: Path) -> Path:
    kinds = list(report["perturbations"])
    metrics = _perturb_metrics(list(report["original"]))
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / max(len(metrics), 1)
    for j, m in enumerate(metrics):
        ax.bar([i + j * width for i in range(len(kinds))], [report["perturbations"][k]["loss"][m] for k in kinds],
               width=width, label=m)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks([i + width * (len(metrics) - 1) / 2 for i in range(len(kinds))], kinds)
    ax.set_ylabel("changed - original")
    ax.set_title(f"query perturbations ({report['n_queries']} queries, {report['mode']})")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _save(fig, path)


def plot_report(report: dict, folder: str | Path, name: str) -> list[Path]:
    """Draw the plots of `report` into `folder` (created) as NAME-KIND.png; returns the paths."""
    plt = _pyplot()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out: list[Path] = []
    try:
        if "comparisons" in report:
            for comp in report["comparisons"]:
                out.append(_differences(plt, report, comp, folder / f"{name}-diff-{Path(comp['run']).stem}.png"))
        elif "tuned_on" in report:
            out.append(_tuning(plt, report, folder / f"{name}-grid.png"))
        elif "perturbations" in report:
            out.append(_perturb(plt, report, folder / f"{name}-perturb.png"))
        elif "ann" in report:
            out.append(_funnel(plt, report, folder / f"{name}-funnel.png"))
        elif "per_query" in report and any("@" in m for m in report["metrics"]):
            out.append(_metric_curves(plt, report, folder / f"{name}-metrics.png"))
    finally:
        plt.close("all")
    return out
