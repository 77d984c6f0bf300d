"""The folders are the pipeline's stages (docs/architecture.md): a module imports only from its own
stage or from stages above it, and no import cycle exists between modules."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import farm

PACKAGE = Path(farm.__file__).parent

# Stage order: a stage may import from itself and from stages listed before it.
STAGES = ["base", "model", "toolkit", "binary", "source", "lint", "provenance", "builder", "schedule", "publish",
          "simulate", "load", "doctor", "commands"]
BASE_MODULES = {"farm", "farm.cacheseal", "farm.errors", "farm.filestamp", "farm.fsutil", "farm.jsonread",
                "farm.netutil", "farm.progress", "farm.table"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _stage(module: str) -> str:
    if module in BASE_MODULES:
        return "base"
    if module == "farm.cli":
        return "commands"
    stage = module.split(".")[1]
    assert stage in STAGES, f"{module} lives in no known stage: add its folder to STAGES and the docs"
    return stage


def _imports(path: Path, module: str) -> set[str]:
    """farm modules imported at module level or in functions (TYPE_CHECKING blocks excluded)."""
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    type_checking: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            type_checking.update(id(n) for n in ast.walk(node))
    for node in ast.walk(tree):
        if id(node) in type_checking:
            continue
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base]) if base else ".".join(anchor)
            if base.split(".")[0] != "farm":
                continue
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.add(candidate if (PACKAGE.parent / (candidate.replace(".", "/") + ".py")).exists() else base)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "farm")
    found.discard(module)
    return found


@functools.cache  # both tests read every module's imports once
def _graph() -> dict[str, set[str]]:
    return {_module_name(p): _imports(p, _module_name(p)) for p in sorted(PACKAGE.rglob("*.py"))}


def test_no_import_against_the_layering() -> None:
    wrong: list[str] = []
    for module, imports in _graph().items():
        here = STAGES.index(_stage(module))
        wrong.extend(f"{module} ({_stage(module)}) imports {imported} ({_stage(imported)})"
                     for imported in imports if STAGES.index(_stage(imported)) > here)
    assert not wrong, "imports against the pipeline's layering:\n" + "\n".join(sorted(wrong))


def test_no_import_cycle() -> None:
    graph = _graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt == "farm" or nxt not in graph:
                continue
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt):] + [nxt]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


def test_one_class_per_name_and_one_meaning_per_module_name() -> None:
    """A name a reader meets means one thing: no two classes of farm/ share a name, and no two
    modules outside the commands (each named after its command) share a file name."""
    classes: dict[str, list[str]] = {}
    modules: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        if path.name != "__init__.py" and not module.startswith("farm.commands."):
            modules.setdefault(path.name, []).append(module)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                classes.setdefault(node.name, []).append(module)
    assert {name: where for name, where in classes.items() if len(where) > 1} == {}
    assert {name: where for name, where in modules.items() if len(where) > 1} == {}
