"""remat's memory, as a user sees it: the live bytes of every buffer remat holds
(``live_bytes``, ``peak_bytes``, ``peak_memory(f, *args)``, ``memory_timeline``; the accounting
itself is ``remat.runtime.memory``, below everything that allocates), plots of timelines, and
the memory/time trade-off of rematerialization, measured: ``tradeoff(fun, *args)`` runs
``jit(grad(fun))`` under the built-in policies and ``auto_remat`` at a sweep of budgets, and
records each one's measured peak and step time; ``plot_tradeoff`` draws them, with the Pareto
front, as a PNG."""


import statistics
import time
from typing import NamedTuple

import numpy as np

from remat.checkpointing import policies as cp
from remat.checkpointing.auto_remat import auto_remat
from remat.checkpointing.budget import recording
from remat.checkpointing.checkpoint import checkpoint
from remat.runtime.memory import (  # noqa: F401  (the user's names)
    held,
    holders,
    host_bytes,
    live_bytes,
    machine_bytes,
    memory_timeline,
    owner,
    peak_bytes,
    peak_memory,
    reset_peak,
    track,
    untrack,
)
from remat.transforms.api import grad
from remat.transforms.jit import jit


def pyplot(what):
    """matplotlib's pyplot on the file-only Agg backend (an optional dependency: ``pip
    install remat[demo]``), or an ImportError naming ``what`` needs it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError(f"{what} needs matplotlib: pip install 'remat[demo]'") from e
    return plt


def save_figure(plt, fig, ax, path, title, xlabel, ylabel):
    """Label, grid and legend ``ax``, write ``fig`` to the PNG ``path``, and close it."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_memory_timeline(timelines, path, title="live bytes over one call"):
    """Draw one timeline or a ``{label: timeline}`` dict of them to a PNG at ``path``
    (matplotlib is an optional dependency: ``pip install remat[demo]``)."""
    plt = pyplot("plot_memory_timeline")
    if not isinstance(timelines, dict):
        timelines = {"timeline": timelines}
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for label, samples in timelines.items():
        xs = np.linspace(0.0, 1.0, len(samples)) if len(samples) > 1 else [0.0]
        ys = [live / 2**20 for _, live in samples]
        peak = max(ys) if ys else 0.0
        ax.plot(xs, ys, label=f"{label} (peak {peak:.1f} MiB)", linewidth=1.2)
    return save_figure(plt, fig, ax, path, title,
                       "progress through the call (fraction of primitive executions)",
                       "live MiB")


# --- the trade-off explorer ------------------------------------------------------------------

BUILTIN_POLICIES = {"nothing_saveable": cp.nothing_saveable, "dots_saveable": cp.dots_saveable,
                    "dots_with_no_batch_dims_saveable": cp.dots_with_no_batch_dims_saveable}


class TradeoffRow(NamedTuple):
    label: str
    budget: int | None  # bytes, for an auto_remat row
    peak_bytes: int  # measured
    seconds: float  # median step time
    pareto: bool = False  # no other row both smaller and faster


class TradeoffTable(list):
    """Rows of a trade-off sweep; ``str`` formats them as a table."""

    def format(self):
        width = max([13] + [len(r.label) for r in self])
        lines = [f"{'configuration':<{width}} {'budget MiB':>10} {'peak MiB':>9} "
                 f"{'ms/step':>9}  pareto"]
        for r in self:
            budget = "" if r.budget is None else f"{r.budget / 2**20:.3f}"
            lines.append(f"{r.label:<{width}} {budget:>10} {r.peak_bytes / 2**20:>9.3f} "
                         f"{r.seconds * 1e3:>9.2f}  {'*' if r.pareto else ''}")
        return "\n".join(lines)

    def __str__(self):
        return self.format()


def _measure(step, args, repeat):
    with recording() as choices:
        step(*args)  # trace and plan once
    peak = peak_memory(step, *args)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        step(*args)
        times.append(time.perf_counter() - start)
    return peak, statistics.median(times), choices


def tradeoff(fun, *args, budgets=(0.0, 0.25, 0.5, 0.75, 1.0), policies=None, variants=None,
             argnums=0, repeat=3):
    """Measure ``jit(grad(fun, argnums))`` with no rematerialization, under each of
    ``policies`` (a ``{label: policy}`` dict; the built-in ones by default) as one checkpoint
    around ``fun``, each of ``variants`` (``{label: function}``: the same model with its own
    hand-written checkpoints, say one per block), and ``auto_remat`` at each of ``budgets``.
    Returns a ``TradeoffTable``."""
    policies = BUILTIN_POLICIES if policies is None else policies
    configs = [("no remat", fun)]
    configs += [(f"checkpoint({label})", checkpoint(fun, policy=p))
                for label, p in policies.items()]
    configs += list((variants or {}).items())
    configs += [(f"auto_remat({b!r})", auto_remat(fun, memory_budget=b)) for b in budgets]
    rows = []
    for label, f in configs:
        peak, seconds, choices = _measure(jit(grad(f, argnums)), args, repeat)
        budget = choices[0].budget if label.startswith("auto_remat") and choices else None
        rows.append(TradeoffRow(label, budget, peak, seconds))
    front = [r._replace(pareto=not any(o.peak_bytes <= r.peak_bytes and o.seconds <= r.seconds
                                       and (o.peak_bytes, o.seconds) != (r.peak_bytes,
                                                                         r.seconds)
                                       for o in rows)) for r in rows]
    return TradeoffTable(front)


def plot_tradeoff(table, path, title="rematerialization: peak memory vs step time"):
    """Draw ``table`` (from ``tradeoff``) as peak MiB against ms per step, the Pareto front
    joined, to a PNG at ``path`` (matplotlib: ``pip install remat[demo]``)."""
    plt = pyplot("plot_tradeoff")
    fig, ax = plt.subplots(figsize=(8, 5))
    for r in table:
        auto = r.budget is not None
        ax.scatter(r.seconds * 1e3, r.peak_bytes / 2**20, marker="o" if auto else "s",
                   color="tab:blue" if auto else "tab:orange")
        ax.annotate(r.label, (r.seconds * 1e3, r.peak_bytes / 2**20), fontsize=7,
                    xytext=(4, 2), textcoords="offset points")
    front = sorted((r for r in table if r.pareto), key=lambda r: r.seconds)
    ax.plot([r.seconds * 1e3 for r in front], [r.peak_bytes / 2**20 for r in front],
            color="tab:green", linestyle="--", label="Pareto front")
    return save_figure(plt, fig, ax, path, title, "ms per step", "measured peak MiB")
