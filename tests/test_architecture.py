"""The package's layout, read from the source with `ast` (nothing is imported).

The package has one folder per domain (graphs, memory, ops, distributed) and a shared
bottom at the top level (records.py, style.py, proof.py, versions.py, exercises.py).
Inside a folder, records.py holds the torch-free records, recorders fill them and views
draw them. Checked here:

(a) Imports that run at import time (module level, outside ``if TYPE_CHECKING:``) form
    no cycle between modules. Function-level imports that would close a cycle are
    allowed only as the documented lazy imports of a view by a record (``Graph.svg``
    reaching graphs/render.py, and so on), listed in LAZY_VIEW_IMPORTS.
(b) No cycle between folders, counting every import (module level and function level):
    the folders import each other in one direction only, and the shared bottom imports
    no folder.
(c) Every records module, every view and the torch-free recorders (planner, pipeline)
    import no torch: neither directly nor through the package modules they import at
    module level.
(d) A view imports no recorder, at any level: it reads only its own folder's records,
    other views of its folder, and the shared bottom. A records module imports only
    the shared records, and (lazily) its own folder's views.
(e) Every module has a role below, so a new module cannot slip past (d).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "autogradviz"
FOLDERS = ("graphs", "memory", "ops", "distributed")


def _name(path: Path) -> str:
    """'graphs.trace' for autogradviz/graphs/trace.py, 'graphs' for its __init__.py."""
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts) or "__init__"


MODULES = {_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
PACKAGES = {"__init__", *FOLDERS}  # the __init__ files: they only gather names

#: What each module is. records: torch-free dataclasses; recorder: fills records (hooks,
#: modes, walks, jobs, arithmetic); view: draws records; model: torch code the chapters
#: run (not a recorder, not a view); shared: the bottom every folder may use.
ROLE = {
    "records": "shared", "style": "shared", "proof": "shared", "versions": "shared",
    "exercises": "shared",
    "graphs.records": "records", "graphs.trace": "recorder", "graphs.modules": "recorder",
    "graphs.live": "recorder", "graphs.backward_order": "recorder",
    "graphs.module_graph": "recorder", "graphs.render": "view", "graphs.rollup": "view",
    "graphs.strips": "view", "graphs.module_view": "view", "graphs.hook_labels": "view",
    "memory.records": "records", "memory.recorder": "recorder", "memory.track": "recorder",
    "memory.gradtrace": "recorder", "memory.plots": "view",
    "ops.records": "records", "ops.dispatch": "recorder", "ops.storage": "recorder",
    "ops.profiling": "recorder",
    "ops.dispatch_view": "view", "ops.storage_view": "view",
    "distributed.records": "records", "distributed.launch": "recorder",
    "distributed.comm": "recorder", "distributed.planner": "recorder",
    "distributed.pipeline": "recorder", "distributed.comm_view": "view",
    "distributed.pipeline_view": "view", "distributed.layer_shard": "model",
}

#: (importer, imported): a record method calling its view through one lazy import.
LAZY_VIEW_IMPORTS = {
    ("graphs.records", "graphs.render"),  # Graph.to_dot/svg/png/html/save
    ("graphs.records", "graphs.strips"),  # BackwardOrder.strip/animation, LiveGraph.strip
    ("graphs.records", "graphs.module_view"),  # ModuleGraph's drawing
    ("memory.records", "memory.plots"),  # MemoryRecord.plot, GradTraceRecord.plot
    ("ops.records", "ops.storage_view"),  # StorageMap's drawing
    ("ops.records", "ops.dispatch_view"),  # DispatchTrace's tables
    ("distributed.records", "distributed.comm_view"),  # CommTrace.plot
    ("distributed.records", "distributed.pipeline_view"),  # PipelineSchedule.plot
}
#: Recorders that need no torch: they work by arithmetic or simulation alone.
TORCH_FREE_RECORDERS = ("distributed.planner", "distributed.pipeline")
TORCH_FREE = sorted({m for m, r in ROLE.items() if r in ("records", "view")}
                    | {"records", "style", *TORCH_FREE_RECORDERS})


def _folder(module: str) -> str:
    """The folder a module lies in; "" for the shared bottom at the top level."""
    head = module.split(".")[0]
    return head if head in FOLDERS else ""


def _is_type_checking(test: ast.expr) -> bool:
    return "TYPE_CHECKING" in ast.unparse(test)


def _resolve(importer: str, level: int, module: str | None) -> str:
    """The absolute dotted name (without "autogradviz.") a relative import names."""
    base = importer.split(".") if importer in PACKAGES and importer != "__init__" else (
        importer.split(".")[:-1] if importer != "__init__" else [])
    base = base[: len(base) - (level - 1)] if level > 1 else base
    return ".".join([*base, *(module.split(".") if module else [])])


def _targets(importer: str, node: ast.Import | ast.ImportFrom) -> tuple[set[str], set[str]]:
    """(package modules, top-level external packages) named by one import statement.

    ``from .x import y`` names module x.y when that is a module, else x."""
    inner: set[str] = set()
    outer: set[str] = set()

    def add(base: str, names: list[str]) -> None:
        for n in names:
            full = f"{base}.{n}" if base else n
            inner.add(full if full in MODULES else (base or "__init__"))

    if isinstance(node, ast.Import):
        for alias in node.names:
            parts = alias.name.split(".")
            if parts[0] == "autogradviz":
                inner.add(".".join(parts[1:]) or "__init__")
            else:
                outer.add(parts[0])
    elif node.level == 0:
        parts = (node.module or "").split(".")
        if parts[0] == "autogradviz":
            add(".".join(parts[1:]), [a.name for a in node.names])
        else:
            outer.add(parts[0])
    else:
        add(_resolve(importer, node.level, node.module), [a.name for a in node.names])
    return inner, outer


def _imports(name: str, tree: ast.Module) -> tuple[set[str], dict[str, set[str]], set[str]]:
    """Package imports at module level, package imports inside functions (by target ->
    functions), external packages at module level."""
    eager: set[str] = set()
    lazy: dict[str, set[str]] = {}
    outer: set[str] = set()

    def visit(node: ast.AST, function: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.orelse:  # only the else branch runs
                    visit(stmt, function)
                continue
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, getattr(child, "name", "<lambda>"))
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                inner, ext = _targets(name, child)
                for m in inner:
                    if function is None:
                        eager.add(m)
                    else:
                        lazy.setdefault(m, set()).add(function)
                if function is None:
                    outer.update(ext)
            visit(child, function)

    visit(tree, None)
    return eager, lazy, outer


READ = {name: _imports(name, ast.parse(path.read_text(), str(path)))
        for name, path in MODULES.items()}
EAGER = {name: {m for m in r[0] if m in MODULES and m != name} for name, r in READ.items()}
ALL_IMPORTS = {name: (r[0] | set(r[1])) - {name} for name, r in READ.items()}


def _reach(start: str, edges: dict[str, set[str]] = EAGER) -> set[str]:
    seen, stack = set(), [start]
    while stack:
        m = stack.pop()
        for nxt in edges.get(m, ()):
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return seen


def test_every_module_has_a_role():
    modules = set(MODULES) - PACKAGES
    assert modules == set(ROLE), (
        f"modules without a role: {sorted(modules - set(ROLE))}; "
        f"roles of modules that do not exist: {sorted(set(ROLE) - modules)}")
    for name, role in ROLE.items():
        assert (role == "shared") == (_folder(name) == ""), name
        assert (role == "records") == name.endswith(".records"), name


def test_module_level_imports_form_no_cycle():
    cycles = sorted(m for m in MODULES if m in _reach(m))
    assert not cycles, f"modules on an import cycle: {cycles}"


def test_function_level_imports_close_only_documented_view_cycles():
    closing = set()
    for name, (_, lazy, _) in READ.items():
        for target in lazy:
            if target in MODULES and target != name and name in _reach(target) | {target}:
                closing.add((name, target))
    undocumented = closing - LAZY_VIEW_IMPORTS
    assert not undocumented, (
        f"function-level imports that close an import cycle: {sorted(undocumented)}; "
        "import down the layers (records <- recorders <- views), or document a record's "
        "lazy view import in LAZY_VIEW_IMPORTS"
    )


def test_lazy_view_imports_are_real():
    """The documented list names imports that exist (it cannot go stale silently)."""
    for importer, target in LAZY_VIEW_IMPORTS:
        assert target in READ[importer][1], (importer, target)
        assert ROLE[importer] == "records" and ROLE[target] == "view"
        assert _folder(importer) == _folder(target), (importer, target)


def _folder_edges() -> dict[str, set[str]]:
    """Folder -> the folders its modules import, at any level ("" is the shared bottom)."""
    edges: dict[str, set[str]] = {}
    for name, targets in ALL_IMPORTS.items():
        if name in PACKAGES:
            continue
        here = _folder(name)
        edges.setdefault(here, set()).update(
            _folder(t) for t in targets if t in MODULES and _folder(t) != here)
    return edges


def test_no_cycle_between_folders():
    edges = _folder_edges()
    cycles = sorted(f for f in edges if f in _reach(f, edges))
    assert not cycles, f"folders on an import cycle: {cycles} (folder imports: {edges})"


def test_shared_bottom_imports_no_folder():
    assert not _folder_edges().get(""), "a top-level module imports a domain folder"


def test_folder_order_as_documented():
    """The direction the package docstring states: distributed -> graphs -> memory ->
    ops -> the shared bottom (an import may skip a step, never go back)."""
    order = ["distributed", "graphs", "memory", "ops", ""]
    for src, targets in _folder_edges().items():
        for dst in targets:
            assert order.index(dst) > order.index(src), (src, dst)


@pytest.mark.parametrize("name", [m for m, r in sorted(ROLE.items()) if r == "view"])
def test_view_imports_no_recorder(name):
    here = _folder(name)
    for target in ALL_IMPORTS[name]:
        if target not in MODULES:
            continue
        role = ROLE.get(target, "package")
        assert role in ("records", "view", "shared"), (
            f"{name} imports {target} (a {role}); a view reads records only")
        if role != "shared":
            assert _folder(target) == here, (
                f"{name} imports {target}: a view reads its own folder's records")


@pytest.mark.parametrize("name", [m for m, r in sorted(ROLE.items()) if r == "records"])
def test_records_import_only_shared_records_and_their_views(name):
    assert EAGER[name] <= {"records"}, (name, sorted(EAGER[name]))
    lazy = {t for t in READ[name][1] if t in MODULES}
    assert {(name, t) for t in lazy} <= LAZY_VIEW_IMPORTS, (name, sorted(lazy))


@pytest.mark.parametrize("name", TORCH_FREE)
def test_torch_free_modules(name):
    closure = {name} | _reach(name)
    with_torch = sorted(m for m in closure if "torch" in READ[m][2])
    assert not with_torch, (
        f"{name} imports torch at module level through {with_torch} "
        f"(its module-level package imports: {sorted(closure - {name})})"
    )


def test_reader_sees_imports():
    """The reader itself: it finds the imports this layout is known to have."""
    assert "graphs.records" in EAGER["graphs.render"] and "torch" in READ["graphs.trace"][2]
    assert "graphs.render" in READ["graphs.records"][1]
    assert "graphs.render" not in EAGER["graphs.records"]
    assert "records" in EAGER["ops.records"]  # from ..records import TensorMeta
    assert "graphs.trace" in EAGER["distributed.comm"]  # from ..graphs.trace import ...
    assert "memory.recorder" in READ["graphs.trace"][1]  # a lazy import across folders
    assert _folder_edges()["distributed"] >= {"graphs", ""}


def _readme_public_names() -> list[str]:
    """First-column names of the README table whose header is | name | kind | ... |."""
    lines = (PACKAGE.parent / "README.md").read_text().splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("| name | kind |"))
    names = []
    for ln in lines[start + 2:]:
        if not ln.startswith("|"):
            break
        cell = ln.split("|")[1].strip()
        assert cell.startswith("`") and cell.endswith("`"), ln
        names.append(cell.strip("`"))
    return names


def test_readme_table_matches_all():
    import autogradviz

    names = _readme_public_names()
    assert len(names) == len(set(names)), "a name is listed twice in the README table"
    assert sorted(names) == sorted(autogradviz.__all__)
    assert all(hasattr(autogradviz, n) for n in autogradviz.__all__)


def test_readme_folder_table_names_every_module():
    """The README's folder table lists every module file of the package, by its path."""
    text = (PACKAGE.parent / "README.md").read_text()
    missing = [name for name in ROLE
               if f"`{name.replace('.', '/')}.py`" not in text]
    assert not missing, f"modules the README's folder table does not name: {missing}"


def test_all_is_one_flat_list_of_strings():
    tree = ast.parse(MODULES["__init__"].read_text())
    assigns = [n for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign))
               and "__all__" in ast.unparse(n.target if not isinstance(n, ast.Assign)
                                            else n.targets[0])]
    assert len(assigns) == 1 and isinstance(assigns[0].value, ast.List)
    assert all(isinstance(e, ast.Constant) and isinstance(e.value, str)
               for e in assigns[0].value.elts)
