"""The package is a stack: no import cycle, and no private name used outside its module.

The graph is built from the source with ``ast`` over ``src/rdmascope``, ``sampler/`` and
``analysis/``: every ``import``/``from ... import`` anywhere in a module (inside functions too: an
import moved into a function to dodge a cycle is still the cycle) is an edge to the module it
names. A cycle fails (strongly connected components of more than one module, or a module importing
itself), and so does ``from m import _name`` or ``m._name`` (an attribute of a module imported
whole) with ``m`` another of our modules (rename it public or move it: a private name is private to its module). ``__future__``-style dunders are
not private names. One exception, ``SPLIT_PACKAGES``: a module split into a package (the capture
format, the request-log readers, the figures) shares its helpers among its own parts as the one module did;
outside that package they stay private.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: import name -> directory (pyproject.toml's package-dir)
ROOTS = {"rdmascope": REPO / "src" / "rdmascope", "rdmascope.sampler": REPO / "sampler",
         "rdmascope.analysis": REPO / "analysis"}


#: modules split into packages whose parts share private helpers (never outside the package)
SPLIT_PACKAGES = ("rdmascope.capture", "rdmascope.analysis.requestlogs",
                  "rdmascope.analysis.figures")


def _inside(pkg: str, mod: str) -> bool:
    return mod == pkg or mod.startswith(pkg + ".")


def modules(roots: dict[str, Path]) -> dict[str, Path]:
    """import name -> file of every module under the roots (a package: its __init__.py)."""
    out: dict[str, Path] = {}
    for pkg, d in roots.items():
        for f in sorted(d.rglob("*.py")):
            parts = list(f.relative_to(d).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join([pkg, *parts])
            if any(name.startswith(p + ".") or name == p for p in roots if p != pkg
                   and p.startswith(pkg + ".")):
                continue  # e.g. src/rdmascope/analysis if it existed: the mapped root wins
            out[name] = f
    return out


def _owner(name: str, mods: dict[str, Path]) -> str | None:
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(mods: dict[str, Path]):
    """(edges: module -> {modules it imports}, private: [(module, line, target, name)])."""
    edges: dict[str, set[str]] = {m: set() for m in mods}
    private = []
    for m, f in mods.items():
        is_pkg = f.name == "__init__.py"
        tree = ast.parse(f.read_text(), str(f))
        aliases: dict[str, str] = {}  # a name bound to one of our modules -> that module
        for node in ast.walk(tree):
            targets: list[tuple[str, str | None]] = []
            if isinstance(node, ast.Import):
                targets = [(a.name, None) for a in node.names]
                for a in node.names:
                    if a.asname and a.name in mods:
                        aliases[a.asname] = a.name
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = m.split(".") if is_pkg else m.split(".")[:-1]
                    base = base[:len(base) - (node.level - 1)]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                for a in node.names:
                    full = f"{mod}.{a.name}"
                    targets.append((full, None) if full in mods else (mod, a.name))
                    if full in mods:
                        aliases[a.asname or a.name] = full
            for t, name in targets:
                owner = _owner(t, mods)
                if owner is None:
                    continue  # not ours (numpy, click, ...)
                if owner != m:
                    edges[m].add(owner)
                    shared = any(_inside(p, m) and _inside(p, owner) for p in SPLIT_PACKAGES)
                    if (name and name.startswith("_") and not name.startswith("__")
                            and not shared):
                        private.append((m, node.lineno, owner, name))
        # ``mod._name`` on a module imported whole (``from . import cluster as C``;
        # ``C._end_ns(m)``) is a private name used across modules too
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in aliases and node.attr.startswith("_")
                    and not node.attr.startswith("__")):
                owner = aliases[node.value.id]
                shared = any(_inside(p, m) and _inside(p, owner) for p in SPLIT_PACKAGES)
                if owner != m and not shared:
                    private.append((m, node.lineno, owner, node.attr))
    return edges, private


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out = []
    counter = 0
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(edges.get(nxt, ())))))
                elif nxt in on:
                    low[v] = min(low[v], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_no_import_cycle():
    edges, _ = import_graph(modules(ROOTS))
    found = cycles(edges)
    assert not found, "import cycles (function-level imports counted):\n" + "\n".join(
        " <-> ".join(c) for c in found)


def test_no_private_name_crosses_a_module():
    _, private = import_graph(modules(ROOTS))
    assert not private, "private names imported from another module:\n" + "\n".join(
        f"{m}:{line} imports {name} from {t}" for m, line, t, name in private)


def test_the_checks_find_what_they_look_for(tmp_path):
    """A planted cycle through a function-level import, and a private import, are found."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "low.py").write_text("def f():\n    from .high import g\n    return g\n")
    (pkg / "high.py").write_text("from pkg.low import f\nfrom .mid import _hidden\n"
                                 "from . import mid as M\nimport pkg.low as L\n"
                                 "x = M._hidden + L._g + M.public + M.__name__\n")
    (pkg / "mid.py").write_text("_hidden = 1\npublic = 2\nfrom . import low\n")
    mods = modules({"pkg": pkg})
    edges, private = import_graph(mods)
    assert edges["pkg.low"] == {"pkg.high"}
    assert cycles(edges) == [["pkg.high", "pkg.low", "pkg.mid"]]
    assert private == [("pkg.high", 2, "pkg.mid", "_hidden"), ("pkg.high", 5, "pkg.mid", "_hidden"),
                       ("pkg.high", 5, "pkg.low", "_g")]


def test_a_split_package_shares_helpers_only_inside(monkeypatch, tmp_path):
    root = tmp_path / "pkg"
    (root / "split").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "split" / "__init__.py").write_text("from .a import _helper\n")
    (root / "split" / "a.py").write_text("_helper = 1\n")
    (root / "user.py").write_text("from pkg.split.a import _helper\n")
    monkeypatch.setattr(__import__(__name__), "SPLIT_PACKAGES", ("pkg.split",))
    _, private = import_graph(modules({"pkg": root}))
    assert private == [("pkg.user", 1, "pkg.split.a", "_helper")]


def test_the_real_graph_is_seen():
    """The graph holds the stack's known edges (a walker that saw nothing would pass)."""
    mods = modules(ROOTS)
    edges, _ = import_graph(mods)
    assert "rdmascope.analysis.stream" in edges["rdmascope.analysis.peaks"]
    assert "rdmascope.capture" in edges["rdmascope.analysis.stream"]
    assert "rdmascope.sampler.daemon" in mods and "rdmascope.cli.attribute" in mods
    assert len(mods) > 60


#: The analysis stack (docs/ARCHITECTURE.md): a module may import its own layer (without a
#: cycle) and the layers below, never one above. Modules of ``rdmascope`` outside the analysis
#: and the CLI (capture format, plausibility, models, ...) are the layer under all of them.
LAYERS = [
    ("load", {"load"}),
    ("engine", {"links", "intervals", "curve", "overline", "windows", "stream", "overline_pass",
                "series"}),
    ("views", {"peaks", "bursts", "verify", "quality", "envelope", "metrics", "ranges", "nccl"}),
    ("request logs and attribution", {"requestlogs", "attribute", "conserving", "cellstats", "compare",
                                      "estimate", "cluster", "cluster_align", "cluster_map",
                                      "cluster_ray", "cluster_reduce"}),
    ("report, figures and exports", {"figures", "timeline", "timeline_stream", "report", "report_tables",
                                     "report_pass", "report_figures", "report_cards",
                                     "cluster_report", "dataset"}),
]


def _layer(mod: str) -> int | None:
    """Layer number of an analysis module (0 = below the analysis; len(LAYERS) + 1 = CLI)."""
    if mod.startswith("rdmascope.cli"):
        return len(LAYERS) + 1
    if mod == "rdmascope.analysis":
        return len(LAYERS)  # the package's re-exports sit just under the CLI
    if mod.startswith("rdmascope.analysis."):
        head = mod.split(".")[2]
        for k, (_, names) in enumerate(LAYERS, start=1):
            if head in names:
                return k
        return None
    return 0


def test_every_analysis_module_has_a_layer():
    mods = modules(ROOTS)
    missing = [m for m in mods if m.startswith("rdmascope.analysis.") and _layer(m) is None]
    assert not missing, f"add these modules to a layer of LAYERS (and ARCHITECTURE.md): {missing}"


def test_no_layer_imports_a_layer_above():
    edges, _ = import_graph(modules(ROOTS))
    up = []
    for m, ts in edges.items():
        if m.startswith("rdmascope.sampler") or m.startswith("rdmascope.emulator"):
            continue  # their own rules (test_sampler_imports.py; the emulator is beside)
        lm = _layer(m)
        for t in ts:
            lt = _layer(t)
            if lm is not None and lt is not None and lt > lm and lm > 0:
                up.append(f"{m} (layer {lm}) imports {t} (layer {lt})")
    assert not up, "imports up the stack:\n" + "\n".join(sorted(up))
