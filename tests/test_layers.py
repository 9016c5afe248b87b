"""The packages of webhook/ as floors, each importing only the floors below it (as Kubernetes'
import-restrictions.yaml does for its tree): every import of every module is read with `ast`
(absolute and relative, at the top or inside a function), and one that reaches a higher floor,
a sibling on the same floor, or a module outside every floor fails, as does any cycle between
packages. docs/architecture.md's list of floors is this table (`python -m tests.test_layers`
prints it)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "architecture.md"

# Bottom to top: a package may import its own modules and any package on a floor below.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("the ground", ("base",)),
    ("the domain", ("model",)),
    ("the rules and Kubernetes I/O", ("admission", "scheduling", "kube")),
    ("metrics and views", ("metrics",)),
    ("front-ends", ("server", "allocator", "extender")),
    ("command line", ("cli",)),
)
# (importer, imported) on one floor that may meet: none, the siblings stay apart.
SIBLING_IMPORTS: frozenset[tuple[str, str]] = frozenset()
TOP_MODULES = ("__init__.py", "__main__.py")  # all webhook/ holds outside its packages


def floor_of(layers=LAYERS) -> dict[str, int]:
    return {package: i for i, (_, packages) in enumerate(layers) for package in packages}


def imported_modules(path: Path, module: str) -> list[tuple[int, str]]:
    """(line, absolute dotted name) of every module `path` imports; for `from X import a`, X,
    or X.a when X is the root package (whose `a` is a module or a package)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if "." in source:
                found.append((node.lineno, source))
            else:
                found += [(node.lineno, f"{source}.{alias.name}") for alias in node.names]
    return found


def package_of(name: str, root: str) -> str | None:
    """`webhook.kube.api` -> `kube`; None outside the tree or for the root package itself."""
    parts = name.split(".")
    return parts[1] if parts[0] == root and len(parts) > 1 else None


def modules(tree: Path) -> list[tuple[Path, str]]:
    return [(path, ".".join(path.relative_to(tree.parent).with_suffix("").parts)
             .removesuffix(".__init__"))
            for path in sorted(tree.rglob("*.py"))]


def package_imports(tree: Path) -> dict[tuple[str, str], list[str]]:
    """(importer, imported) package -> where: 'file:line imports name'."""
    edges: dict[tuple[str, str], list[str]] = {}
    for path, module in modules(tree):
        importer = package_of(module, tree.name)
        if importer is None:
            continue
        for line, name in imported_modules(path, module):
            imported = package_of(name, tree.name)
            if imported is None or imported == importer:
                continue
            where = f"{path.relative_to(tree.parent)}:{line} imports {name}"
            edges.setdefault((importer, imported), []).append(where)
    return edges


def layer_breaks(tree: Path, layers=LAYERS, siblings=SIBLING_IMPORTS) -> list[str]:
    """Every module outside a floor and every import that is not downward, one line each."""
    floors = floor_of(layers)
    found = []
    for path in sorted(tree.iterdir()):
        if path.suffix == ".py" and path.name not in TOP_MODULES:
            found.append(f"{path.relative_to(tree.parent)}: a module at the top of "
                         f"{tree.name}/, on no floor (move it into a package of LAYERS)")
        # (a folder holding no source, such as a moved package's __pycache__ left behind, is none)
        elif path.is_dir() and not path.name.startswith("__") and any(path.rglob("*.py")):
            if path.name not in floors:
                found.append(f"{path.relative_to(tree.parent)}/: a package on no floor of LAYERS")
            if not (path / "__init__.py").exists():  # setuptools' find_packages would leave it out
                found.append(f"{path.relative_to(tree.parent)}/: no __init__.py")
    for (importer, imported), wheres in sorted(package_imports(tree).items()):
        if importer not in floors:
            continue  # said above
        if imported not in floors:
            why = f"{imported} is on no floor"
        elif floors[imported] > floors[importer]:
            why = f"{imported} is above {importer}"
        elif floors[imported] == floors[importer] and (importer, imported) not in siblings:
            why = f"{imported} and {importer} are siblings on one floor"
        else:
            continue
        found += [f"{where}: {why}" for where in wheres]
    return found


def package_cycles(tree: Path) -> list[list[str]]:
    """Each cycle of the package graph once, as the packages along it."""
    graph: dict[str, set[str]] = {}
    for importer, imported in package_imports(tree):
        graph.setdefault(importer, set()).add(imported)
    cycles, seen = [], set()

    def walk(package, path):
        for nxt in sorted(graph.get(package, ())):
            if nxt in path:
                cycle = path[path.index(nxt):]
                key = frozenset(cycle)
                if key not in seen:
                    seen.add(key)
                    cycles.append(cycle + [nxt])
            else:
                walk(nxt, path + [nxt])

    for start in sorted(graph):
        walk(start, [start])
    return cycles


def docs_table(layers=LAYERS) -> str:
    """The floors as docs/architecture.md lists them, top first."""
    rows = ["| floor | packages | may import |", "|---|---|---|"]
    for i in reversed(range(len(layers))):
        name, packages = layers[i]
        below = ", ".join(f"{p}/" for _, ps in layers[:i] for p in ps) or "the standard library and third-party packages only"
        rows.append(f"| {i + 1}. {name} | {', '.join(f'webhook/{p}/' for p in packages)} | {below} |")
    return "\n".join(rows)


def documented_table(text: str) -> str:
    start, end = "<!-- layers: tests/test_layers.py -->", "<!-- /layers -->"
    if start not in text or end not in text:
        return ""
    return text[text.index(start) + len(start):text.index(end)].strip()


def test_every_import_goes_down_a_floor():
    found = layer_breaks(ROOT / "webhook")
    assert not found, "imports against the floors (tests/test_layers.py LAYERS):\n" + "\n".join(found)


def test_no_two_packages_import_each_other():
    cycles = package_cycles(ROOT / "webhook")
    assert not cycles, "package cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_docs_list_the_floors_of_this_table():
    assert documented_table(DOCS.read_text()) == docs_table(), (
        "docs/architecture.md's floors differ from LAYERS; the block to paste:\n" + docs_table())


# The checker itself, on small trees: each arrow it must refuse, and the ones it must allow.
TINY = (("bottom", ("low",)), ("middle", ("left", "right")), ("top", ("high",)))


@pytest.mark.parametrize("files, expected", [
    ({"high/a.py": "from ..low import b\nfrom ..left.c import d\n"}, []),
    ({"low/a.py": "from ..high import b\n"}, ["pkg/low/a.py:1 imports pkg.high: high is above low"]),
    ({"low/a.py": "import pkg.left.c\n"}, ["pkg/low/a.py:1 imports pkg.left.c: left is above low"]),
    ({"low/a.py": "def f():\n    from pkg.high.b import c\n"},
     ["pkg/low/a.py:2 imports pkg.high.b: high is above low"]),
    ({"left/a.py": "from ..right import b\n"},
     ["pkg/left/a.py:1 imports pkg.right: right and left are siblings on one floor"]),
    ({"loose.py": "", "high/a.py": "from .. import loose\n"},
     ["pkg/loose.py: a module at the top of pkg/, on no floor (move it into a package of LAYERS)",
      "pkg/high/a.py:1 imports pkg.loose: loose is on no floor"]),
    ({"stray/a.py": ""}, ["pkg/stray/: a package on no floor of LAYERS", "pkg/stray/: no __init__.py"]),
    ({"low/a.py": "from . import b\nfrom .b import c\n", "low/b.py": ""}, []),
])
def test_the_checker_refuses_each_arrow_that_is_not_downward(tmp_path, files, expected):
    tree = tiny_tree(tmp_path, files)
    assert layer_breaks(tree, TINY) == expected


@pytest.mark.parametrize("files, expected", [
    ({"high/a.py": "from ..low import b\n"}, []),
    ({"low/a.py": "from ..high import b\n", "high/b.py": "from ..low.a import c\n"},
     [["high", "low", "high"]]),
    ({"left/a.py": "from ..right import b\n", "right/b.py": "from ..high import c\n",
      "high/c.py": "import pkg.left.a\n"}, [["high", "left", "right", "high"]]),
])
def test_the_checker_finds_package_cycles(tmp_path, files, expected):
    assert package_cycles(tiny_tree(tmp_path, files)) == expected


def tiny_tree(tmp_path: Path, files: dict[str, str]) -> Path:
    tree = tmp_path / "pkg"
    for package in ("", *(p for _, ps in TINY for p in ps)):
        (tree / package).mkdir(parents=True, exist_ok=True)
        (tree / package / "__init__.py").touch()
    for name, text in files.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text(text)
    return tree


if __name__ == "__main__":  # the block docs/architecture.md holds
    sys.stdout.write(docs_table() + "\n")
