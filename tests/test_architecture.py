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
        "kwiden.arguments",
        "kwiden.exports",
        "kwiden.messages",
        "kwiden.keras_internals",
        "kwiden.files",
        "kwiden.memory",
        "kwiden.quiet",
        "kwiden.growth",
        "kwiden.growth.expansion",
        "kwiden.models.naming",
        "kwiden.models.layout",
        "kwiden.models.family_model",
        "kwiden.text",
        "kwiden.training",
        "kwiden.training.compute",
        "kwiden.training.distribution",
        "kwiden.ner",
        "kwiden.ner.targets",
        "kwiden.similarity",
    ),
    (
        "kwiden.layers",
        "kwiden.optimizers",
        "kwiden.ner.losses",
        "kwiden.ner.metrics",
        "kwiden.similarity.losses",
        "kwiden.similarity.retrieval",
    ),
    ("kwiden.growth.graph",),
    ("kwiden.growth.walk", "kwiden.growth.depth", "kwiden.generation.cache"),
    ("kwiden.growth.verify", "kwiden.models.config", "kwiden.models.family"),
    ("kwiden.models",),
    ("kwiden.checkpoints",),
    ("kwiden.models.builder",),
    ("kwiden.growth.hub",),
    (
        "kwiden.growth.arguments",
        "kwiden.growth.check",
        "kwiden.growth.optimizer",
        "kwiden.growth.options",
        "kwiden.growth.pipeline",
        "kwiden.growth.plan",
        "kwiden.growth.rebuild",
        "kwiden.growth.streaming",
        "kwiden.growth.transfer",
    ),
    (
        "kwiden.training.admin",
        "kwiden.training.backups",
        "kwiden.training.fit",
        "kwiden.training.loop",
        "kwiden.training.recipe",
        "kwiden.training.schedule",
        "kwiden.training.stretch",
        "kwiden.testing",
        "kwiden.similarity.sentence",
        "kwiden.similarity.sts",
    ),
    ("kwiden.pretraining",),
    ("kwiden.generation",),
    ("kwiden.similarity.similar",),
    ("kwiden", "kwiden.losses", "kwiden.metrics"),
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


def lazy_imports():
    """`{package: [(module, names, False)]}`: what the packages whose names are imported as first used
    (`kwiden.exports.lazy`) import then, read from their tables."""
    import importlib

    from kwiden import exports

    for name, path in modules():
        if path.name == "__init__.py" and "kwiden.exports" in {target for target, _, _ in imports(path, name)}:
            importlib.import_module(name)
    found = {}
    for package, table in exports.TABLES.items():
        for name, module in table.items():
            found.setdefault(package, []).append((module, [name], False))
    return found


GRAPH = {name: imports(path, name) for name, path in modules()}
for _package, _lazy in lazy_imports().items():
    GRAPH[_package] = GRAPH[_package] + _lazy


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


# The commands import what runs once their arguments are checked; SimBERT's objective, whose declarations the
# command line reads before Keras is imported, imports its Keras loss and encoder where it computes.
IMPORTING_INSIDE_FUNCTIONS = ("kwiden.cli", "kwiden.pretraining.objectives.simbert")


def test_no_kwiden_imports_inside_functions_but_the_commands():
    nested = [
        (m, t) for m, deps in GRAPH.items() for t, _, inside in deps if inside and m not in IMPORTING_INSIDE_FUNCTIONS
    ]
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


def test_a_program_that_imports_kwiden_loads_a_saved_kwiden_model(tmp_path):
    """`import kwiden` registers kwiden's Keras objects, though its names are imported as first used: a model saved
    with kwiden's layers, loss, metric, optimizer and schedule loads in a fresh process. Saved here: only the
    loading needs a fresh process (starting one and importing Keras takes seconds)."""
    import kwiden
    from kwiden.testing import tiny_config

    model = kwiden.build_transformer_model(tiny_config(), model="bert")
    schedule = kwiden.optimizers.WarmupDecay(1e-3, warmup_steps=2, total_steps=10)
    model.compile(kwiden.optimizers.AdamW(schedule), [None, kwiden.losses.InBatchSimilarity()],
                  metrics=[None, [kwiden.metrics.SpanF1()]])  # fmt: skip
    model.save(tmp_path / "model.keras")
    loading = "import sys, keras, kwiden; print(type(keras.saving.load_model(sys.argv[1]).optimizer).__name__)"
    done = subprocess.run(
        [sys.executable, "-c", loading, str(tmp_path / "model.keras")], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "AdamW"


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


def _heading_anchors(path):
    """The anchors GitHub gives a Markdown file's headings: lower case, punctuation dropped, spaces as hyphens."""
    anchors, seen, fenced = set(), {}, False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,6} ", line):
            slug = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def _relative_links(path):
    """(line number, target) of every relative link outside code in a Markdown file."""
    fenced = False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        for target in re.findall(r"\[[^\]]*\]\(([^)\s]+)\)", re.sub(r"`[^`]*`", "", line)):
            if not re.match(r"[a-z]+:", target):
                yield number, target


def test_markdown_links_resolve():
    """Every relative link in README.md and docs/ names a file (or folder) that exists, and a heading there."""
    root = PACKAGE.parent
    broken = []
    for page in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        for number, target in _relative_links(page):
            path, _, anchor = target.partition("#")
            linked = (page.parent / path) if path else page
            where = f"{page.relative_to(root)}:{number}: {target}"
            if not linked.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in _heading_anchors(linked):
                broken.append(f"{where} (no such heading)")
    assert not broken, "broken links:\n" + "\n".join(broken)


# A module a newcomer can read in one sitting: past this, split it by concern.
MAX_MODULE_LINES = 500


@pytest.mark.parametrize("module", [name for name, _ in modules()])
def test_no_module_is_longer_than_a_sitting(module):
    path = dict(modules())[module]
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{path} has {lines} lines (at most {MAX_MODULE_LINES}): split it by concern."


# A function a reader holds in mind at once; `grow`'s stages (options → plan → rebuild → transfer → optimizer →
# check), each a step of one idea, shorter still. Lines of the body, its docstring left out.
MAX_FUNCTION_LINES = 50
MAX_STAGE_LINES = 40
GROWTH_STAGES = {
    "kwiden.growth.options": "resolve",
    "kwiden.growth.plan": "plan_growth",
    "kwiden.growth.rebuild": "rebuild",
    "kwiden.growth.transfer": "transfer",
    "kwiden.growth.optimizer": "grow_optimizer",
    "kwiden.growth.check": "check",
}


def _body_lines(function):
    first = function.body[0]
    documented = (
        isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str)
    )
    return function.end_lineno - (first.end_lineno + 1 if documented else first.lineno) + 1


def test_no_function_is_longer_than_a_thought():
    long = []
    for name, path in modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                limit = MAX_STAGE_LINES if GROWTH_STAGES.get(name) == node.name else MAX_FUNCTION_LINES
                if _body_lines(node) > limit:
                    long.append(f"{path}:{node.lineno} {node.name}: {_body_lines(node)} lines (at most {limit})")
    assert not long, "split these by idea:\n" + "\n".join(long)


def test_layer_names_are_spelled_only_in_naming():
    """Block and layer names ("Transformer-0-FeedForward", "Embedding-Token", …) come from `kwiden.models.naming`: a
    second spelling would part from it silently. Docstrings may show them."""
    prefixes = ("Transformer-", "Embedding-", "MLM-", "Output-", "Input-", "Pooler")
    spelled = []
    for name, path in modules():
        if name == "kwiden.models.naming":
            continue
        tree = ast.parse(path.read_text())
        documented = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in documented:
                if any(prefix in node.value for prefix in prefixes):
                    spelled.append(f"{path}:{node.lineno} {node.value[:50]!r}")
    assert not spelled, "use kwiden.models.naming's names:\n" + "\n".join(spelled)


def test_pretrain_options_are_declared_once():
    """`kwiden.pretrain`'s signature, the `kwiden pretrain` flags and the options table of docs/pretraining.md
    follow `kwiden.pretraining.options.PretrainOptions` and the registered objectives' own options
    (`Objective.Options`): the same names, defaults and flags."""
    import dataclasses
    import inspect

    import kwiden
    from kwiden import arguments, cli
    from kwiden.pretraining import objectives, options

    fields = dataclasses.fields(options.PretrainOptions)
    signature = inspect.signature(kwiden.pretrain).parameters
    assert list(signature) == ["corpus", "output_dir", *(f.name for f in fields), "verbose", "objective_options"]
    assert signature["objective_options"].kind == inspect.Parameter.VAR_KEYWORD
    assert {f.name: signature[f.name].default for f in fields} == arguments.defaults(options.PretrainOptions)
    command = cli.parser().parse_args(["pretrain", "corpus.txt", "--output-dir", "run"])
    own = objectives.option_fields()
    assert options.given(command) == (arguments.defaults(options.PretrainOptions), arguments.defaults(own))
    page = (PACKAGE.parent / "docs" / "pretraining.md").read_text()
    section = page.split("\n## Options\n")[1].split("\n## ")[0]
    table = "\n".join(line for line in section.splitlines() if line.startswith("| `--"))
    missing = [arguments.flag_of(f) for f in (*fields, *own) if f"`{arguments.flag_of(f)}" not in table]
    assert not missing, f"docs/pretraining.md's options table lacks {missing}"


def test_the_modules_every_pretraining_run_goes_through_name_no_objective():
    """An objective owns its options, checks, fingerprint, heads and losses: the shared modules of `kwiden.pretrain`
    name none of kwiden's objectives nor their options, in code or strings (a comment may cite a measurement)."""
    from kwiden.pretraining import objectives

    words = {*objectives.registered(), *(field.name for field in objectives.option_fields())}
    words |= {word.replace("_", "-") for word in words}
    for name in ("options", "run", "checks", "outputs"):
        path = PACKAGE / "pretraining" / f"{name}.py"
        for node in ast.walk(ast.parse(path.read_text())):
            text = {ast.Constant: "value", ast.Name: "id", ast.Attribute: "attr", ast.FunctionDef: "name"}
            value = getattr(node, text.get(type(node), ""), None)
            if isinstance(value, str):
                named = sorted(word for word in words if word in value.lower())
                assert not named, f"{path}:{node.lineno} names {named}"


def test_each_command_takes_its_functions_options_and_defaults():
    """`kwiden generate`, `kwiden similar` and `kwiden eval-sts` make their flags from one declaration each
    (`kwiden.arguments.option` fields), whose names and defaults are those of the function each calls (its
    signature, in order), and a command line without flags gives the function's defaults (or says why not)."""
    import dataclasses
    import inspect

    import kwiden
    from kwiden import arguments, cli
    from kwiden.generation.arguments import GenerateOptions, SimilarOptions
    from kwiden.similarity.sts import StsOptions

    parser = cli.parser()
    for argv, options, function, leading, not_offered in [
        (["generate", "ckpt", "a prompt"], GenerateOptions, kwiden.generate, ["model", "tokenizer", "prompts"], []),
        (["similar", "ckpt", "a text"], SimilarOptions, kwiden.similar, ["checkpoint", "texts"], []),
        (["eval-sts", "ckpt", "f.tsv"], StsOptions, kwiden.SentenceEncoder, ["checkpoint"],
         ["maxlen", "lowercase", "model", "tokenizer"]),
    ]:  # fmt: skip
        parameters = inspect.signature(function).parameters
        assert list(parameters)[: len(leading)] == leading
        taken = [name for name in list(parameters)[len(leading) :] if name not in not_offered]
        fields = dataclasses.fields(options)
        assert taken == [field.name for field in fields], function
        assert arguments.defaults(options) == {name: parameters[name].default for name in taken}, function
        command = parser.parse_args(argv)
        assert arguments.given(command, options) == {f.name: arguments.command_default(f) for f in fields}
        assert all(arguments.command_default(f) == f.default or f.metadata["why"] for f in fields)


def test_growth_options_are_declared_once():
    """`kwiden.grow`, `kwiden.grow_checkpoint`, `kwiden grow` and `fit_growing`
    take the growth options `kwiden/growth/arguments.py` declares
    (`GrowthArguments`, `kwiden.arguments` fields), with its defaults, and no others."""
    import contextlib
    import dataclasses
    import inspect
    import io

    import kwiden
    from kwiden import arguments, cli
    from kwiden.growth import arguments as options
    from kwiden.growth.options import resolve
    from kwiden.training import schedule as training

    def taken(function, leading):
        parameters = list(inspect.signature(function).parameters.values())
        assert [p.name for p in parameters[: len(leading)]] == leading
        assert all(p.kind == p.POSITIONAL_OR_KEYWORD for p in parameters), function.__name__
        return [(p.name, p.default) for p in parameters[len(leading) :]]

    # The signatures: the names, their order and their defaults.
    assert taken(kwiden.grow, ["model"]) == list(options.defaults(options.GROW).items())
    assert taken(kwiden.grow_checkpoint, ["src", "dst"]) == list(options.defaults(options.CHECKPOINT).items())
    for function, entry in ((kwiden.grow, options.GROW), (kwiden.grow_checkpoint, options.CHECKPOINT)):
        missing = [
            name
            for name in options.names(entry)
            if not re.search(rf"`{name}[`=]|^ +(\w+, )*{name}(, \w+)*:", function.__doc__, re.M)
        ]
        assert not missing, f"{function.__name__}'s docstring does not say what {missing} do"
    # `resolve` takes options by name and its defaults are the declaration's.
    assert [p.kind for p in inspect.signature(resolve).parameters.values()][1:] == [inspect.Parameter.VAR_KEYWORD]
    # A default of its own (an entry point's, or the command's) says why; every option is some entry point's.
    fields = dataclasses.fields(options.GrowthArguments)
    assert all(f.metadata["why"] for f in fields if f.metadata["own"] or arguments.command_default(f) != f.default)
    assert {f.name for f in fields} == set(options.names(options.GROW)) | set(options.names(options.CHECKPOINT))

    # The command: every flag is a declared option's, with the command's default.
    args = vars(cli.parser().parse_args(["grow", "src", "dst"]))
    flagged = [field for field in fields if arguments.flag_of(field)]
    assert set(args) == {"command", "run", "src", "dst"} | {field.name for field in flagged}
    assert {field.name: args[field.name] for field in flagged} == {
        field.name: arguments.command_default(field) for field in flagged
    }
    help_text = io.StringIO()
    with contextlib.redirect_stdout(help_text), pytest.raises(SystemExit, match="^0$"):  # --help exits 0
        cli.parser().parse_args(["grow", "--help"])
    flags = set(re.findall(r"--[a-z][a-z-]*", help_text.getvalue()))
    assert flags == {"--help"} | {arguments.flag_of(field) for field in flagged}

    # Every call of grow / grow_checkpoint / resolve in the package names declared options only.
    entries = {"grow": options.GROW, "resolve": options.GROW, "grow_checkpoint": options.CHECKPOINT}
    for name, path in modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                called = getattr(node.func, "attr", getattr(node.func, "id", None))
                if called in entries:
                    given = {keyword.arg for keyword in node.keywords if keyword.arg is not None}
                    unknown = given - set(options.names(entries[called]))
                    assert not unknown, f"{name}:{node.lineno} passes {called} {sorted(unknown)}, undeclared"

    # A schedule sets grow's options but the optimizer, which the trainer passes.
    assert training.GROW_ARGUMENTS == tuple(name for name in options.names(options.GROW) if name != "optimizer")
    kwiden.GrowthSchedule({1: {name: options.defaults(options.GROW)[name] for name in training.GROW_ARGUMENTS}})
    with pytest.raises(ValueError, match=r"has 'dtype', which kwiden.grow does not take .* it takes k, check, rtol"):
        kwiden.GrowthSchedule({1: dict(dtype="float32")})


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


def test_every_module_is_listed_in_its_folder_in_architecture_md():
    """docs/architecture.md's table names each module in the row of its folder."""
    table = {}
    folder = None
    for line in (PACKAGE.parent / "docs" / "architecture.md").read_text().splitlines():
        cells = [cell.strip() for cell in line.split("|")[1:-1]]
        if len(cells) != 3 or cells[0] in ("folder", "---"):
            continue
        folder = cells[0].strip("`") or folder
        table.setdefault(folder, set()).update(re.findall(r"`(\w+)`", cells[1]))
    unlisted = []
    for _, path in modules():
        if path.stem == "__init__":
            continue  # a folder's own docstring says what it holds
        folder_path = path.parent.relative_to(PACKAGE.parent).as_posix()
        folder_name = "kwiden/" if folder_path == "kwiden" else folder_path.removeprefix("kwiden/") + "/"
        listed = table.get(folder_name, set())
        if path.stem not in listed:
            unlisted.append(f"{folder_name}{path.stem}")
    assert not unlisted, f"docs/architecture.md's table does not list: {unlisted}"


def test_every_folder_of_the_package_is_in_the_docs_index():
    index = (PACKAGE.parent / "docs" / "README.md").read_text()
    folders = sorted({p.parent.relative_to(PACKAGE.parent).as_posix() for _, p in modules()} - {"kwiden"})
    top = sorted({"/".join(f.split("/")[:2]) for f in folders})
    assert [f for f in top if f"`{f}/`" not in index] == []


def node(name):
    return name.replace(".", "_")


def drawing():
    """docs/imports.md: every module a box in its folder's box, every import an arrow (mermaid)."""
    folders = {}
    for name, path in modules():
        folders.setdefault(path.parent.relative_to(PACKAGE.parent).as_posix(), []).append(name)
    lines = ["flowchart LR"]
    for folder, names in sorted(folders.items()):
        lines.append(f'  subgraph folder_{node(folder.replace("/", "."))}["{folder}/"]')
        lines.extend(
            f'    {node(name)}["{name.rsplit(".", 1)[-1] if name != folder.replace("/", ".") else "__init__"}"]'
            for name in names
        )
        lines.append("  end")
    arrows = sorted(
        {(m, t) for m, deps in GRAPH.items() for t, _, _ in deps if t != m and t in GRAPH and not m.startswith(t + ".")}
    )
    lines.extend(f"  {node(m)} --> {node(t)}" for m, t in arrows)
    return (
        "# kwiden's imports\n\n"
        "Every module of the package is a box inside its folder's box; an arrow goes from a module to each\n"
        f"kwiden module it imports ({len(GRAPH)} modules, {len(arrows)} imports). Generated by\n"
        "`python tests/test_architecture.py`; `test_the_drawing_of_the_imports_is_current` fails when it is\n"
        "stale. [architecture.md](architecture.md) says what each module knows.\n\n"
        "```mermaid\n" + "\n".join(lines) + "\n```\n"
    )


def test_the_drawing_of_the_imports_is_current():
    drawn = (PACKAGE.parent / "docs" / "imports.md").read_text()
    assert drawn == drawing(), "docs/imports.md is stale: run `python tests/test_architecture.py`."


if __name__ == "__main__":
    (PACKAGE.parent / "docs" / "imports.md").write_text(drawing())


def test_the_tests_mirror_the_package():
    """Each folder of the package has its tests in the folder of its name; a folder of tests names a folder of
    the package, or what is not a package's: examples (the CLUE scripts), parity (against bert4keras)."""
    tests = PACKAGE.parent / "tests"
    package_folders = {p.parent.name for _, p in modules() if p.parent != PACKAGE and p.parent.parent == PACKAGE}
    test_folders = {p.name for p in tests.iterdir() if p.is_dir() and any(p.glob("test_*.py"))}
    assert sorted(package_folders - test_folders) == []
    assert sorted(test_folders - package_folders) == ["examples", "parity"]


def test_every_raises_says_what_the_message_must_say():
    """A `pytest.raises` without `match=` passes on any error of its type, a wrong one too."""
    bare = []
    for path in sorted((PACKAGE.parent / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            called = getattr(node, "func", None)
            if isinstance(node, ast.Call) and getattr(called, "attr", None) == "raises":
                if getattr(getattr(called, "value", None), "id", None) == "pytest":
                    bare += [] if any(k.arg == "match" for k in node.keywords) else [f"{path.name}:{node.lineno}"]
    assert bare == []
