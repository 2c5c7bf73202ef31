"""A package's names imported as they are first used (PEP 562): `import kwiden` and the command line's parsing
import no backend; Keras is imported by the first name that needs it."""

import importlib
import importlib.util
import pkgutil

# Each lazy package's table, `{package: {name: module}}` (tests/test_architecture.py reads it as imports).
TABLES = {}
# The modules that register kwiden's Keras objects (layers, the family model, losses, metrics, optimizers and
# schedules) as they are imported: Keras' load_model finds a custom object only once it is registered.
KERAS_OBJECTS = ("kwiden.layers", "kwiden.models.family_model", "kwiden.losses", "kwiden.metrics", "kwiden.optimizers")


def register_keras_objects():
    """Import the modules that register kwiden's Keras objects, so that `keras.saving.load_model` reads a model
    that holds them. `import kwiden` does so in a Python program; the `kwiden` command, once a command computes."""
    for module in KERAS_OBJECTS:
        importlib.import_module(module)


def lazy(package, names, modules=None):
    """`(__getattr__, __dir__)` for the package named `package`: each of `names` (`{name: module}`) is looked up in
    its module when first asked for, and kept; each of `modules` (`{name: module}`) is that module; any other name
    the package's submodule of that name, as if it had been imported."""
    modules = modules or {}
    table = TABLES[package] = {**names, **modules}

    def __getattr__(name):
        if name not in table:  # a submodule, as the package's attribute once imported
            if name.startswith("_") or importlib.util.find_spec(f"{package}.{name}") is None:
                raise AttributeError(f"module {package!r} has no attribute {name!r}")
            return importlib.import_module(f"{package}.{name}")
        module = importlib.import_module(table[name])
        value = module if name in modules else getattr(module, name)
        setattr(importlib.import_module(package), name, value)
        return value

    def __dir__():
        own = importlib.import_module(package)
        submodules = {info.name for info in pkgutil.iter_modules(own.__path__)}
        return sorted({*vars(own), *table, *submodules})

    return __getattr__, __dir__
