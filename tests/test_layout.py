"""The package's shape, checked: imports point one way (no cycle, lazy imports included), no
module past the size a reader can hold, and every package's table of contents names its
folder's modules."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "swinkit"
MAX_LINES = 300
# modules still over MAX_LINES, each to be split; a new one over it fails the test
KNOWN_LONG: set[str] = set()  # none left


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py") if "configs" not in p.parts}


def imports_of(path: Path, known: set[str]) -> set[str]:
    """The swinkit modules ``path`` imports anywhere in it (a function's lazy imports too):
    ``from a.b import c`` is a.b.c where that is a module, else a.b."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known
                     else node.module for a in node.names]
        else:
            continue
        out |= {n for n in names if n in known}
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted.

    >>> cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}})
    [['a', 'b']]
    """
    index, low, on, stack, out = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
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
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def test_no_import_cycle_in_swinkit():
    mods = modules()
    known = set(mods)
    # a package's __init__ is imported by its own modules' absolute imports of it only
    # through re-exports; an edge from a module to its own package is not a cycle of code
    graph = {m: {i for i in imports_of(p, known) if not m.startswith(i + ".")}
             for m, p in mods.items()}
    assert cycles(graph) == []


def test_no_module_is_longer_than_a_reader_can_hold():
    long = {module_name(p): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert set(long) <= KNOWN_LONG, {m: n for m, n in long.items() if m not in KNOWN_LONG}


TOC_LINE = re.compile(r"^ {4}([\w.]+\.py|[\w]+/)\s")


def table_of_contents(init: Path) -> set[str]:
    """The modules and subpackages a package docstring lists, one per indented line."""
    doc = ast.get_docstring(ast.parse(init.read_text()), clean=False) or ""
    return {m.group(1).rstrip("/") for line in doc.splitlines() if (m := TOC_LINE.match(line))}


def folder_contents(package: Path) -> set[str]:
    modules = {p.name for p in package.glob("*.py") if p.name not in ("__init__.py", "__main__.py")}
    packages = {p.name for p in package.iterdir() if (p / "__init__.py").exists()}
    return modules | packages


PACKAGES = sorted(p.parent for p in PACKAGE.rglob("__init__.py") if p.parent != PACKAGE)


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_package_lists_what_its_folder_holds(package):
    assert table_of_contents(package / "__init__.py") == folder_contents(package)


def test_table_of_contents_reads_indented_module_lines(tmp_path):
    init = tmp_path / "__init__.py"
    init.write_text('"""Doc.\n\n    a.py    one\n    sub/    two\n  b.py not indented enough\n"""\n')
    assert table_of_contents(init) == {"a.py", "sub"}


MAX_FUNCTION_LINES = 60


def test_a_function_over_60_lines_says_why():
    """Functions stay short; one that does not carries a ``# Long:`` comment saying why."""
    unexplained = []
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = text.splitlines()[node.lineno - 1:node.end_lineno]
                if len(body) > MAX_FUNCTION_LINES and not any(
                        line.strip().startswith("# Long:") for line in body):
                    unexplained.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert unexplained == []


# What each layer may not import: the process boundary (a rank never reaches up to what
# launches it) and the numbers/rendering layers kept free of anything that launches or trains.
# The predictor (swinkit/predict/) is fenced: no core layer imports any of it (it launches
# through a run spec and reads the basis a run keeps, as any user of the core would), and its
# sides follow the core's rules: its numbers as attribution, its rendering as report, its
# ranks as rank (a loader's rank function from components/ included).
PREDICTOR = {"predict", "predict.numbers", "predict.rank", "predict.supervisor", "predict.report"}
FORBIDDEN = {
    "rank": {"runs", "experiments", "components", "cli", "launch", "report", "attribution"},
    "measure": {"rank", "runs", "experiments", "components", "cli", "launch", "report"},
    "runs": {"experiments", "components", "cli", "report"},
    "components": {"experiments", "cli", "report"},
    "experiments": {"cli"},
    "attribution": {"rank", "runs", "experiments", "components", "cli", "launch", "report",
                    "model", "data"},
    "report": {"rank", "runs", "experiments", "components", "cli", "launch", "model", "data"},
    "predict.numbers": {"rank", "runs", "experiments", "components", "cli", "launch", "report",
                        "model", "data", "predict.rank", "predict.supervisor", "predict.report"},
    "predict.report": {"rank", "runs", "experiments", "components", "cli", "launch", "model",
                       "data", "predict.rank", "predict.supervisor"},
    "predict.rank": {"runs", "experiments", "cli", "launch", "report", "attribution",
                     "predict.numbers", "predict.supervisor", "predict.report"},
    "predict.supervisor": {"cli", "report", "predict.report"},
}
CORE = ("rank", "measure", "runs", "components", "experiments", "attribution", "report",
        "launch", "model", "data", "config", "injection", "ddp_options", "run_spec", "precision")
for _layer in CORE:
    FORBIDDEN[_layer] = FORBIDDEN.get(_layer, set()) | PREDICTOR


def layer(module: str) -> str:
    """A module's layer: its top-level package under swinkit (``rank``, ``runs``, ...), or
    for the predictor its side (``predict.numbers``, ``predict.rank``, ...).

    >>> layer("swinkit.rank.ddp"), layer("swinkit.predict.numbers.links"), layer("swinkit")
    ('rank', 'predict.numbers', 'swinkit')
    """
    parts = module.split(".")
    if len(parts) > 2 and parts[1] == "predict":
        return f"predict.{parts[2]}"
    return parts[1] if len(parts) > 1 else module


def layer_violations(edges: dict[str, set[str]]) -> list[str]:
    """``a.b.c -> x.y`` pairs where a's layer may not import x's.

    >>> layer_violations({"swinkit.rank.ddp": {"swinkit.runs.sweep", "swinkit.measure.x"}})
    ['swinkit.rank.ddp -> swinkit.runs.sweep']
    >>> layer_violations({"swinkit.runs.ddp_sweep": {"swinkit.predict.numbers.basis"}})
    ['swinkit.runs.ddp_sweep -> swinkit.predict.numbers.basis']
    """
    return sorted(f"{m} -> {d}" for m, deps in edges.items() for d in deps
                  if layer(d) in FORBIDDEN.get(layer(m), ()))


def test_imports_follow_the_layers():
    mods = modules()
    known = set(mods)
    assert layer_violations({m: imports_of(p, known) for m, p in mods.items()}) == []


def _function(path: Path, name: str) -> ast.FunctionDef:
    return next(n for n in ast.walk(ast.parse(path.read_text()))
                if isinstance(n, ast.FunctionDef) and n.name == name)


def test_the_ddp_loop_reads_top_to_bottom_on_the_shared_skeleton():
    """``ddp_rank``: set up, each step of its plan on ``run_steps`` (as every engine's loop),
    read out; at most 60 lines and 3 parameters (the rank, its spec, its plan): the modes live
    in the plan, not in the loop's arguments."""
    loop = _function(PACKAGE / "rank" / "ddp.py", "ddp_rank")
    assert loop.end_lineno - loop.lineno + 1 <= 60
    assert len(loop.args.args) + len(loop.args.kwonlyargs) <= 3 and not loop.args.kwarg
    calls = {n.func.id for n in ast.walk(loop) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Name)}
    assert {"setup_rank", "run_steps", "read_out"} <= calls
