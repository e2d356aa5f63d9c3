""":meth:`PrecisionCertificate.plot <amdinfer.quantize.PrecisionCertificate.plot>`: the certificate as a figure.

Left: each threshold of the verdict, the measured value as a bar and the bound as a line (green where it
holds, red where not). Right: the layers in graph order, coloured by the precision chosen, with each layer's
sensitivity where it was measured (a mixed-precision search) as the bar height, else a bar of height 1.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["PRECISION_COLOURS", "plot_certificate"]

#: Bar colour per precision.
PRECISION_COLOURS = {"int8": "#1f77b4", "fp16": "#ff7f0e", "fp32": "#7f7f7f"}


def plot_certificate(cert: Any, path: str | Path | None = None) -> Any:
    """Draw ``cert`` (see the module docstring); save it to ``path`` (format by suffix) when given.

    Raises:
        ImportError: matplotlib is not installed.
    """
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ImportError("PrecisionCertificate.plot needs matplotlib: pip install matplotlib") from exc
    fig = Figure(figsize=(12, 4), layout="tight")
    left, right = fig.subplots(1, 2, width_ratios=[1, 3])
    _thresholds(left, cert)
    _layers(right, cert)
    fig.suptitle(f"{cert.precision} {cert.task}: {cert.verdict} ({cert.judged_by}, {cert.data.items} items)")
    if path is not None:  # a temporary file beside it, renamed over: a planted symbolic link is not followed
        from .._support._files import write_atomic

        fmt = Path(path).suffix.lstrip(".").lower() or "png"
        write_atomic(path, lambda f: fig.savefig(f, format=fmt), argument="path")
    return fig


def _thresholds(ax: Any, cert: Any) -> None:
    if not cert.thresholds:
        ax.text(0.5, 0.5, "no threshold", ha="center", va="center")
        ax.set_axis_off()
        return
    xs = range(len(cert.thresholds))
    values = [t.value if t.value is not None else 0.0 for t in cert.thresholds]
    colours = ["#2ca02c" if t.holds else "#d62728" for t in cert.thresholds]
    ax.bar(xs, values, color=colours)
    for x, t in zip(xs, cert.thresholds):
        ax.hlines(t.bound, x - 0.4, x + 0.4, colors="black", linestyles="dashed")
        ax.annotate(f"{t.op} {t.bound:g}", (x, t.bound), fontsize=7, ha="center", va="bottom")
    ax.set_xticks(list(xs), [t.metric for t in cert.thresholds], rotation=20, fontsize=8)
    ax.set_ylabel("measured against the float model")
    ax.set_title("task metric per threshold", fontsize=9)


def _layers(ax: Any, cert: Any) -> None:
    if not cert.layers:
        ax.text(0.5, 0.5, "layers not recorded", ha="center", va="center")
        ax.set_axis_off()
        return
    measured = any(layer.sensitivity is not None for layer in cert.layers)
    heights = [
        (layer.sensitivity if layer.sensitivity is not None else 0.0) if measured else 1.0 for layer in cert.layers
    ]
    colours = [PRECISION_COLOURS.get(layer.precision, "#9467bd") for layer in cert.layers]
    ax.bar(range(len(cert.layers)), heights, color=colours, width=0.8)
    if len(cert.layers) <= 40:  # few enough to name the layers kept out of int8
        for i, layer in enumerate(cert.layers):
            if layer.precision != "int8":
                ax.annotate(f"{layer.node} ({layer.reason})", (i, heights[i]), fontsize=6, rotation=60)
    for precision, colour in PRECISION_COLOURS.items():
        n = sum(1 for layer in cert.layers if layer.precision == precision)
        if n:
            ax.bar([], [], color=colour, label=f"{precision} ({n})")
    ax.legend(fontsize=7, loc="upper right")
    ax.set_xlabel("layer (graph order)")
    ax.set_ylabel("sensitivity (metric error, this layer alone quantized)" if measured else "precision chosen")
    if not measured:
        ax.set_yticks([])
    ax.set_title("precision per layer" + (" and sensitivity" if measured else ""), fontsize=9)
