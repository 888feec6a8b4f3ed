"""remat's import graph, read with ``ast`` (nothing is imported): data flows one way (DESIGN §3),
so no module may import, at module level or inside a function, a module that imports it back.

Files are nodes; so are folders (a subpackage's modules are one node, a top-level module its own),
where ``remat/__init__.py``, the face that re-exports everything, is left out. A failure names the
import that closes the circle, and the circle it closes."""

import ast
import collections
import functools
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "remat"

MAX_LOCAL_IMPORTS = 8


def _modules():
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _targets(mods, module, is_package, node):
    """The remat modules an import statement loads (``from pkg import name`` loads ``pkg``,
    or ``pkg.name`` when that is a module)."""
    def known_prefix(name):
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name

    if isinstance(node, ast.Import):
        return [t for t in (known_prefix(a.name) for a in node.names) if t]
    base = node.module or ""
    if node.level:
        parts = module.split(".")[: None if is_package else -1]
        parts = parts[: len(parts) - (node.level - 1)]
        base = ".".join(parts + ([node.module] if node.module else []))
    out = []
    for alias in node.names:
        full = f"{base}.{alias.name}"
        target = full if full in mods else known_prefix(base)
        if target:
            out.append(target)
    return out


@functools.cache
def _graph():
    mods = _modules()
    edges = collections.defaultdict(set)
    local = []
    for module, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        stack = [(tree, False)]
        while stack:
            node, in_function = stack.pop()
            for child in ast.iter_child_nodes(node):
                inside = in_function or isinstance(
                    child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    targets = [t for t in _targets(mods, module, path.name == "__init__.py",
                                                   child) if t != module]
                    edges[module].update(targets)
                    if inside and targets:
                        lines = path.read_text().splitlines()
                        said = "#" in lines[child.lineno - 1] or \
                            lines[child.lineno - 2].strip().startswith("#")
                        local.append((f"{path.relative_to(PACKAGE.parent)}:{child.lineno}", said))
                stack.append((child, inside))
    return mods, edges, local


def _circles(nodes, edges):
    """Strongly connected components of more than one node (Tarjan, iteratively)."""
    index, low, on_stack, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(comp)
    return out


def _path(edges, start, goal, within):
    """A shortest import path from ``start`` to ``goal`` inside ``within``."""
    previous = {start: None}
    queue = collections.deque([start])
    while queue:
        v = queue.popleft()
        if v == goal:
            break
        for w in sorted(edges.get(v, ())):
            if w in within and w not in previous:
                previous[w] = v
                queue.append(w)
    path = [goal]
    while previous[path[-1]] is not None:
        path.append(previous[path[-1]])
    return path[::-1]


def _describe(edges, circle):
    """A line per import inside ``circle``; first the imports without which no circle is left
    among its modules (the one that closed it, when a single import did)."""
    sub = {u: edges.get(u, set()) & circle for u in circle}
    closing, others = [], []
    for u in sorted(circle):
        for v in sorted(sub[u]):
            back = _path(edges, v, u, circle)
            line = f"{u} imports {v}, which imports it back: {' -> '.join(back + [v])}"
            without = dict(sub, **{u: sub[u] - {v}})
            alone = not _circles(circle, without)
            (closing if alone else others).append(line)
    return closing + others


def _folder(module):
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 else module


def test_no_import_circle_among_files():
    mods, edges, _ = _graph()
    problems = [line for circle in _circles(mods, edges) for line in _describe(edges, circle)]
    assert not problems, "import circles among remat's files:\n" + "\n".join(problems[:20])


def test_no_import_circle_among_folders():
    mods, edges, _ = _graph()
    folder_edges = collections.defaultdict(set)
    for u, targets in edges.items():
        if u == "remat":
            continue
        for v in targets:
            if v != "remat" and _folder(u) != _folder(v):
                folder_edges[_folder(u)].add(_folder(v))
    folders = {_folder(m) for m in mods if m != "remat"}
    problems = [line for circle in _circles(folders, folder_edges)
                for line in _describe(folder_edges, circle)]
    assert not problems, "import circles among remat's folders:\n" + "\n".join(problems[:20])


def test_few_function_local_imports_each_saying_why():
    _, _, local = _graph()
    assert len(local) <= MAX_LOCAL_IMPORTS, f"function-local imports of remat: {local}"
    silent = [where for where, said in local if not said]
    assert not silent, f"function-local imports without a comment saying why: {silent}"
