"""The import graph of the product and its tools: no module imports itself round a circle, the product no tool."""

import ast
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[1]
#: Where each package of the `gatehouse` namespace lives in a source checkout (pyproject.toml's package-dir).
PACKAGES = {"gatehouse": PROJECT / "gatehouse", "gatehouse.components": PROJECT / "components",
            "gatehouse.eval": PROJECT / "eval"}


def _modules() -> dict[str, Path]:
    modules = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            modules[".".join((package, *(parts[:-1] if parts[-1] == "__init__" else parts)))] = path
    return modules


def _imports(path: Path, modules: dict[str, Path]):
    """(module imported, at the module's top level?) for every import the file runs, in functions too; not the ones
    under `if TYPE_CHECKING:`, which never run."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    def inside(kinds) -> set[int]:
        return {id(node) for block in ast.walk(tree) if kinds(block) for child in block.body for node in ast.walk(child)}
    never = inside(lambda node: isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING")
    later = inside(lambda node: isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef))
    for node in ast.walk(tree):
        if id(node) in never or not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        for alias in node.names:
            name = f"{node.module}.{alias.name}" if isinstance(node, ast.ImportFrom) and node.module else alias.name
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name:
                yield name, id(node) not in later


@pytest.fixture(scope="module")
def imports() -> dict[str, list[tuple[str, bool]]]:
    """Each module and what it imports (module, at its top level?), each file read once."""
    modules = _modules()
    return {name: list(_imports(path, modules)) for name, path in modules.items()}


def test_no_module_of_the_product_or_its_tools_imports_itself_round_a_circle(imports):
    graph = {name: {other for other, _ in found if other != name and not name.startswith(other + ".")}
             for name, found in imports.items()}
    done: set[str] = set()

    def circle_from(name: str, trail: list[str]) -> list[str] | None:
        if name in trail:
            return [*trail[trail.index(name):], name]
        if name in done:
            return None
        found = next((circle for other in sorted(graph[name]) if (circle := circle_from(other, [*trail, name]))), None)
        done.add(name)
        return found

    circles = [circle for name in sorted(graph) if (circle := circle_from(name, []))]
    assert not circles, " and ".join(" -> ".join(circle) for circle in circles)


def test_no_product_module_imports_a_tool_when_it_is_imported(imports):
    tools = sorted(f"{name} imports {other}" for name, found in imports.items() if not name.startswith("gatehouse.eval")
                   for other, top in found if top and other.startswith("gatehouse.eval"))
    assert not tools
