"""PNG plots (matplotlib, imported only when a plot is asked for)."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional

from summit_jobs.errors import UserError
from trainer import files


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise UserError("plots need matplotlib: pip install 'summit-jobs[plots]'.") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save(fig, path: str) -> None:
    """Atomic: a half-written PNG never sits under the final name."""
    p = Path(path)
    if not p.parent.is_dir():
        raise UserError(f"cannot write {p}: its folder {p.parent} does not exist.")
    with files.atomic_path(p, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=110, bbox_inches="tight")


def scaling_plot(rows: List[Dict[str, float]], path: str) -> None:
    plt = _pyplot()
    nodes = [r["nodes"] for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    ax1.loglog(nodes, [r["seconds"] / 60 for r in rows], "o-", label="projected")
    ideal = rows[0]["seconds"] * rows[0]["nodes"]
    ax1.loglog(nodes, [ideal / n / 60 for n in nodes], "--", color="grey", label="ideal")
    paper = [(r["nodes"], r["paper_seconds"] / 60) for r in rows if "paper_seconds" in r]
    if paper:
        ax1.loglog(*zip(*paper), "s", color="black", label="paper, Table 3")
    ax1.set_xlabel("nodes")
    ax1.set_ylabel("time to train (min)")
    ax1.legend()
    ax1.grid(True, which="both", alpha=0.3)
    ax2.semilogx(nodes, [100 * r["efficiency"] for r in rows], "o-")
    ax2.set_xlabel("nodes")
    ax2.set_ylabel("scaling efficiency (%)")
    ax2.set_ylim(0, 105)
    ax2.grid(True, which="both", alpha=0.3)
    fig.suptitle("Projected scaling")
    save(fig, path)
    plt.close(fig)


def _label_once(label: str, seen: set) -> str:
    """A legend entry once per label: repeated marks (a boundary drawn in every panel, one test point per
    checkpoint) share it."""
    if label in seen:
        return "_nolegend_"
    seen.add(label)
    return label


def _draw_panel(ax, panel: Dict) -> None:
    """One panel: its series (dashed or solid, in the run's colour, faint where ``alpha`` says), then the
    horizontal lines (chance), vertical marks (chain boundaries) and points (the multi-clip test).

    The legend has one entry per series, line and kind of point. Chain boundaries get none: a chain has a
    boundary per link, and 19 entries hid the curves; they are thin, faint and explained by the figure's
    note. A series without points gets no entry either (an entry for nothing drawn misleads)."""
    seen: set = set()
    for s in panel["series"]:
        if not s["x"]:
            continue
        ax.plot(s["x"], s["y"], marker="o" if len(s["x"]) <= 30 else None,
                linestyle="--" if s.get("style") == "dashed" else "-", color=s.get("color"),
                alpha=s.get("alpha", 1.0), label=_label_once(s["label"], seen), markersize=3, linewidth=1.2)
    for h in panel.get("hlines", []):
        ax.axhline(h["y"], color=h.get("color", "grey"), linestyle=":", linewidth=1.0,
                   label=_label_once(h["label"], seen))
    for v in panel.get("vlines", []):
        ax.axvline(v["x"], color=v.get("color", "grey"), linestyle=":", linewidth=0.6, alpha=0.45,
                   label="_nolegend_", zorder=0)
    for p in panel.get("points", []):
        ax.plot([p["x"]], [p["y"]], marker="*", markersize=9, linestyle="none", color=p.get("color"),
                markeredgecolor="black", markeredgewidth=0.5, label=_label_once(p["label"], seen))
    if panel.get("logy") and any(y > 0 for s in panel["series"] for y in s["y"]):
        ax.set_yscale("log")
    if panel.get("ylim"):
        low, high = panel["ylim"]
        ax.set_ylim(bottom=low, top=high)
    ax.set_xlabel(panel["xlabel"])
    ax.set_ylabel(panel["ylabel"])
    ax.grid(True, alpha=0.3)
    if len(seen) > 1:
        ax.legend(fontsize=7)


def panels_plot(panels: List[Dict], path: str, title: str, note: Optional[str] = None) -> None:
    """Side-by-side panels of line series and marks, drawn exactly from the data given.

    The report keeps the same panel data in its report.json, so what a PNG
    shows can be checked against the metrics without reading pixels. A panel is
    ``{"xlabel", "ylabel", "series": [{"label", "x", "y", "color"?, "style"?, "alpha"?}], "logy"?,
    "ylim"? ([low, high], either None for automatic), "hlines"?: [{"y", "label"}], "vlines"?: [{"x",
    "label", "color"?}] (drawn with no legend entry), "points"?: [{"x", "y", "label"}]}``. ``note``: a line
    under the panels (what the marks mean).
    """
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        _draw_panel(ax, panel)
    fig.suptitle(title)
    if note:
        fig.text(0.5, -0.02, note, ha="center", va="top", fontsize=8, color="dimgrey", wrap=True)
    save(fig, path)
    plt.close(fig)
