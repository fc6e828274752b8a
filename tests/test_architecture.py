"""The package's layering, read from the source with `ast` (nothing is imported).

(a) Imports between package modules that run at import time (module level, outside
    ``if TYPE_CHECKING:``) form no cycle. Function-level imports that would close a
    cycle are allowed only as the documented lazy imports of a view by a record
    (``Graph.svg`` reaching render.py, and so on), listed in LAZY_VIEW_IMPORTS.
(b) records.py and the views that need no torch (plots.py, storage_view.py,
    dispatch_view.py) import no torch: neither directly
    nor through the package modules they import at module level.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "autogradviz"
MODULES = {p.stem: p for p in sorted(PACKAGE.glob("*.py"))}

#: (importer, imported): a record method calling its view through one lazy import.
LAZY_VIEW_IMPORTS = {
    ("records", "render"),  # Graph.to_dot/svg/png/html/save
    ("records", "strips"),  # BackwardOrder.strip/animation, LiveGraph.strip
    ("records", "plots"),  # MemoryRecord.plot, GradTraceRecord.plot
    ("records", "module_view"),  # ModuleGraph's drawing
    ("records", "storage_view"),  # StorageMap's drawing
    ("records", "dispatch_view"),  # DispatchTrace's tables
    ("records", "comm_view"),  # CommTrace.plot
    ("records", "pipeline_view"),  # PipelineSchedule.plot
}
TORCH_FREE = ("records", "plots", "storage_view", "dispatch_view", "planner",
              "pipeline", "pipeline_view", "comm_view")


def _is_type_checking(test: ast.expr) -> bool:
    return "TYPE_CHECKING" in ast.unparse(test)


def _targets(node: ast.Import | ast.ImportFrom) -> tuple[set[str], set[str]]:
    """(package modules, top-level external packages) named by one import statement."""
    inner: set[str] = set()
    outer: set[str] = set()
    if isinstance(node, ast.Import):
        for alias in node.names:
            parts = alias.name.split(".")
            if parts[0] == "autogradviz":
                inner.add(parts[1] if len(parts) > 1 else "__init__")
            else:
                outer.add(parts[0])
    elif node.level == 0:
        parts = (node.module or "").split(".")
        if parts[0] == "autogradviz":
            inner.update([parts[1]] if len(parts) > 1 else [a.name for a in node.names])
        else:
            outer.add(parts[0])
    elif node.module:  # from .x import y
        inner.add(node.module.split(".")[0])
    else:  # from . import x
        inner.update(a.name for a in node.names)
    return inner, outer


def _imports(tree: ast.Module) -> tuple[dict[str, set[str]], dict[str, set[str]], set[str]]:
    """Package imports at module level, package imports inside functions (by target ->
    functions), external packages at module level."""
    eager: dict[str, set[str]] = {}
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
                inner, ext = _targets(child)
                for m in inner:
                    if function is None:
                        eager.setdefault(m, set())
                    else:
                        lazy.setdefault(m, set()).add(function)
                if function is None:
                    outer.update(ext)
            visit(child, function)

    visit(tree, None)
    return eager, lazy, outer


READ = {name: _imports(ast.parse(path.read_text(), str(path))) for name, path in MODULES.items()}
EAGER = {name: {m for m in r[0] if m in MODULES and m != name} for name, r in READ.items()}


def _reach(start: str) -> set[str]:
    seen, stack = set(), [start]
    while stack:
        m = stack.pop()
        for nxt in EAGER.get(m, ()):
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return seen


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
        if target in MODULES:
            assert target in READ[importer][1], (importer, target)


@pytest.mark.parametrize("name", TORCH_FREE)
def test_torch_free_modules(name):
    closure = {name} | _reach(name)
    with_torch = sorted(m for m in closure if "torch" in READ[m][2])
    assert not with_torch, (
        f"{name}.py imports torch at module level through {with_torch} "
        f"(its module-level package imports: {sorted(closure - {name})})"
    )


def test_reader_sees_imports():
    """The reader itself: it finds the imports this layout is known to have."""
    assert "records" in EAGER["render"] and "torch" in READ["graph"][2]
    assert "render" in READ["records"][1] and "render" not in EAGER["records"]


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


def test_all_is_one_flat_list_of_strings():
    tree = ast.parse(MODULES["__init__"].read_text())
    assigns = [n for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign))
               and "__all__" in ast.unparse(n.target if not isinstance(n, ast.Assign)
                                            else n.targets[0])]
    assert len(assigns) == 1 and isinstance(assigns[0].value, ast.List)
    assert all(isinstance(e, ast.Constant) and isinstance(e.value, str)
               for e in assigns[0].value.elts)
