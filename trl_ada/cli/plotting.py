"""matplotlib for the plots of the demo and the comparison: an optional dependency (`pip install "trl-ada[plot]"`).

Without it the runs and their results are the same; only the PNG is not written, and a line says which extra
installs it.
"""

from __future__ import annotations


def pyplot():
    """`matplotlib.pyplot` on the non-interactive Agg backend, or None when matplotlib is not installed."""
    try:
        import matplotlib
    except ImportError:
        print('[trl-ada] no plot written: plotting needs matplotlib (pip install "trl-ada[plot]")', flush=True)
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig, path: str, title: str | None = None, dpi: int = 100, **title_kwargs) -> None:
    """Title, lay out, write and close a figure (closed, so that a long run's later plots don't accumulate figures)."""
    if title is not None:
        fig.suptitle(title, **title_kwargs)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    import matplotlib.pyplot as plt

    plt.close(fig)
