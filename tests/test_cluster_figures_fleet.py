"""The cluster figures at fleet size: 256 nodes stay readable (rows folded worst first, the zoom's
nodes as a band with the worst as lines), and what is shown is said on the figure."""

import numpy as np
import pandas as pd
from rdmascope.analysis.figures import figure_of, plot_cluster_heatmap, plot_cluster_zoom

MS = 1_000_000


def _rates(n=256, windows=3000, seed=1):
    rng = np.random.default_rng(seed)
    hosts = [f"spark-{i:03d}" for i in range(1, n + 1)]
    v = rng.uniform(0, 90, size=(windows, n))
    return pd.DataFrame(v, index=pd.Index(np.arange(windows, dtype=np.int64) * MS), columns=hosts)


def test_heatmap_of_256_nodes_folds_all_but_the_worst_into_a_median_row():
    r = _rates()
    order = list(reversed(r.columns))  # "worst first": the last host first
    ax = plot_cluster_heatmap(r, order=order, max_columns=500, max_rows=40)
    fig = figure_of(ax)
    w, h = fig.get_size_inches() * fig.dpi
    assert h < 2000 and w < 2000  # was 1210 x 9143 px at 256 nodes
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert len(labels) == 40 and labels[:39] == order[:39]
    assert labels[-1] == "median of 217 other nodes" and ax.rdmascope_folded == 217
    assert "the last the median of 217 nodes" in ax.get_xlabel()
    img = ax.get_images()[0].get_array()
    k = int(np.ceil(len(r) / 500))
    med = np.median(r[order[39:]].to_numpy(), axis=1)  # by hand, then pooled by max
    expect = med[: len(med) // k * k].reshape(-1, k).max(axis=1)
    assert np.allclose(img[-1], expect)
    first = r[order[0]].to_numpy()
    assert np.allclose(img[0], first[: len(first) // k * k].reshape(-1, k).max(axis=1))


def test_a_coarse_index_is_said_in_the_pooled_label():
    r = _rates(n=4, windows=4000)
    r.index = r.index * 10  # 10 ms bins
    ax = plot_cluster_heatmap(r, max_columns=1000)
    assert "the highest 1 ms rate of 40 ms" in ax.get_xlabel()


def test_zoom_of_256_nodes_is_a_band_and_the_legend_stays_under_the_title():
    r = _rates(windows=60)
    order = list(r.columns[::-1])
    ax = plot_cluster_zoom(r, order=order)
    assert ax.rdmascope_banded == 256
    lines = [ln for ln in ax.get_lines() if ln.get_label().startswith("spark-")]
    assert [ln.get_label() for ln in lines] == order[:8]
    fig = figure_of(ax)
    fig.canvas.draw()
    rend = fig.canvas.get_renderer()
    leg = ax.get_legend().get_window_extent(rend)
    title = ax._left_title.get_window_extent(rend)
    assert leg.y1 <= title.y0 + 1 or leg.x0 >= title.x1  # no overlap
    med = [ln for ln in ax.get_lines() if ln.get_label() == "median of 256 nodes"]
    y = np.asarray(med[0].get_ydata(), dtype=float)
    want = np.median(r.to_numpy(), axis=1)  # by hand, per window
    assert np.allclose(np.unique(y[np.isfinite(y)]), np.unique(want))


def test_a_few_nodes_are_drawn_as_before():
    r = _rates(n=6, windows=60)
    ax = plot_cluster_zoom(r)
    assert ax.rdmascope_banded == 0 and len(ax.get_lines()) == 6
    ax = plot_cluster_heatmap(r)
    assert ax.rdmascope_folded == 0 and len(ax.get_yticklabels()) == 6
