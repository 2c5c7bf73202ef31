"""The package's dependencies point one way (docs/architecture.md)."""

import ast
import os
import pathlib
import re
import subprocess
import sys

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "kwiden"

# Lower layers know nothing of higher ones: the calculus no Keras model, layers
# no graph, the graph no growth, growth no KerasHub-free public API, … .
LAYERS = [
    (
        "kwiden.messages",
        "kwiden.expansion",
        "kwiden.naming",
        "kwiden.keras_internals",
        "kwiden.files",
        "kwiden.corpus",
        "kwiden.tokenizer",
        "kwiden.compute",
        "kwiden.distribution",
        "kwiden.layout",
    ),
    ("kwiden.layers", "kwiden.optimizers"),
    ("kwiden.graph",),
    ("kwiden.walk", "kwiden.plan", "kwiden.depth"),
    ("kwiden.verify", "kwiden.models.config", "kwiden.models.family"),
    ("kwiden.checkpoints",),
    ("kwiden.models", "kwiden.hub"),
    ("kwiden.growth",),
    ("kwiden.admin", "kwiden.testing", "kwiden.training"),
    ("kwiden",),
    ("kwiden.cli", "kwiden.demo"),
]


def rank(module):
    """The layer of `module`: its longest prefix in LAYERS."""
    best = None
    for level, names in enumerate(LAYERS):
        for name in names:
            if module == name or module.startswith(name + "."):
                if best is None or len(name) > best[1]:
                    best = (level, len(name))
    assert best is not None, f"{module} has no place in LAYERS: add it where it belongs."
    return best[0]


def modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        yield name, path


def is_module(name):
    path = PACKAGE.parent / pathlib.Path(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def imports(path, name):
    """`[(imported kwiden module, imported names, inside a function)]` of a module."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.Import):
                found.extend((a.name, [], nested) for a in child.names if a.name.split(".")[0] == "kwiden")
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    base = ".".join(
                        package.split(".")[: len(package.split(".")) - child.level + 1] + ([base] if base else [])
                    )
                if base.split(".")[0] == "kwiden":
                    for alias in child.names:
                        target = f"{base}.{alias.name}"
                        found.append((target if is_module(target) else base, [alias.name], nested))
            visit(child, nested)

    visit(tree, False)
    return found


GRAPH = {name: imports(path, name) for name, path in modules()}


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_imports_point_down(module):
    for target, _, _ in GRAPH[module]:
        if target == module or module.startswith(target + "."):
            continue  # a package's own modules
        assert rank(target) <= rank(module), f"{module} (layer {rank(module)}) imports {target} (layer {rank(target)})"


def test_no_import_cycles():
    edges = {
        m: {t for t, _, _ in deps if t != m and not m.startswith(t + ".") and t in GRAPH} for m, deps in GRAPH.items()
    }
    state = {}

    def visit(module, path):
        if state.get(module) == "done":
            return
        assert state.get(module) != "open", "import cycle: " + " -> ".join(path + [module])
        state[module] = "open"
        for target in sorted(edges[module]):
            visit(target, path + [module])
        state[module] = "done"

    for module in sorted(edges):
        visit(module, [])


def test_no_kwiden_imports_inside_functions_but_the_commands():
    nested = [(m, t) for m, deps in GRAPH.items() for t, _, inside in deps if inside and m != "kwiden.cli"]
    assert not nested, nested


def test_no_private_names_imported_across_modules():
    private = [(m, t, n) for m, deps in GRAPH.items() for t, names, _ in deps for n in names if n.startswith("_")]
    assert not private, private


def test_keras_internals_live_in_one_module():
    pattern = ("_nodes_by_depth", "keras.src", "_keras_history", "_flatten_layers", "_get_variable_index")
    for name, path in modules():
        if name != "kwiden.keras_internals":
            text = path.read_text()
            assert not [p for p in pattern if p in text], f"{name} reaches into Keras internals"


def test_importing_kwiden_on_jax_imports_no_tensorflow():
    code = "import sys, kwiden; print('tensorflow' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "KERAS_BACKEND": "jax"},
        check=True,
    )
    assert result.stdout.strip() == "False", result.stderr


def test_code_is_formatted_and_lint_free():
    """`ruff format` and `ruff check` with the settings in pyproject.toml."""
    root = PACKAGE.parent
    paths = ["kwiden", "tests", "benchmarks", "examples"]
    for command in (["format", "--check"], ["check"]):
        result = subprocess.run(
            [sys.executable, "-m", "ruff", *command, *paths], cwd=root, capture_output=True, text=True
        )
        assert result.returncode == 0, result.stdout + result.stderr


def test_the_readme_test_command_is_what_ci_runs():
    root = PACKAGE.parent
    readme = (root / "README.md").read_text().split("```bash\n", 1)[1].split("```", 1)[0]
    test_line = next(line for line in readme.splitlines() if "pytest" in line)
    ci = (root / ".ci" / "run").read_text()
    for command in test_line.split("#")[0].split("&&"):
        command = (
            command.strip()
            .replace("pip install -e", "python -m pip install -q -e")
            .replace("pip install --no-deps", "python -m pip install -q --no-deps")
        )
        assert command in ci, f"README runs `{command}`; .ci/run does not"


@pytest.mark.parametrize(
    "old, new, name",
    [
        ("kwiden.plan", "kwiden.walk", "walk"),
        ("kwiden.growth.checkpoint", "kwiden.growth.streaming", "grow_checkpoint"),
    ],
)
def test_renamed_modules_still_answer_with_a_deprecation_warning(old, new, name):
    import importlib

    with pytest.warns(DeprecationWarning, match=new):
        found = getattr(importlib.import_module(old), name)
    assert found is getattr(importlib.import_module(new), name)


def test_the_paths_the_docs_name_are_there():
    """Every file or folder docs/*.md names (`tests/growth/test_grow.py`), and every test it names with `::`."""
    root = PACKAGE.parent
    pattern = re.compile(r"\b((?:tests|kwiden|benchmarks|examples|notebooks)/[\w./-]*\w)(?:::(\w+))?")
    missing = []
    for doc in sorted((root / "docs").glob("*.md")):
        for path, test in pattern.findall(doc.read_text()):
            if not (root / path).exists():
                missing.append(f"{doc.name}: {path}")
            elif test and not re.search(rf"^def {test}\b", (root / path).read_text(), re.MULTILINE):
                missing.append(f"{doc.name}: {path}::{test}")
    assert not missing, missing
