"""Two versions of the controllers in one test process, for the mixed-version models (`test_mixed_versions.py`).

During a rolling upgrade (or a rollback) an old and a new replica of a controller run at once: both serve webhooks,
either may lead. To run them side by side over one `MemoryApi`, the baseline's packages (`mnnvl_testbed.baseline`,
the tree the upgrade tests start from) are imported from its sources under module objects of their own: while they
load, `sys.modules` holds no `mnnvl_*` module of the current code and the baseline's `src` directories come first
on `sys.path`; the modules loaded are kept, and the current ones put back. The two versions then share nothing of
the controllers' code, only what lies outside it (pydantic, kopf, the Kubernetes client, whose `ApiException` is
`kube.ApiError` in both), and what crosses between them is what crosses between two processes: the API server's
objects, plain dicts in `MemoryApi`.

`Version.counterpart` finds a version's own module, class, function or module-level value for one of the current
code, by where the current code defines it; a model builds each replica from its version's objects that way.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib
import importlib.metadata
import pathlib
import pkgutil
import sys
import types
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar, cast

from mnnvl_testbed import baseline as baselines

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

#: The packages of the controllers whose versions the models run side by side (every package their code imports
#: of ours; `load` checks that no loaded module refers to a module outside these of the current code).
PACKAGES = ("mnnvl_api", "mnnvl_runtime", "mnnvl_lws", "mnnvl_ds", "mnnvl_guardian")


#: Modules whose imports inside functions are harmless here: the functions run only in a controller's process, never
#: in a model.
LATE_IMPORTS = frozenset({"mnnvl_runtime.operator"})  # `main`: certificates for its webhook server


class VersionError(RuntimeError):
    """A tree's packages cannot be loaded as a version of their own."""


def _versioned(module_name: str) -> bool:
    return module_name.partition(".")[0] in PACKAGES


@dataclasses.dataclass(frozen=True, eq=False)
class Version:
    """One version of the controllers' code: `modules` by name (None: the current code, as imported)."""

    name: str
    modules: Mapping[str, types.ModuleType] | None = None
    #: `counterpart`'s answers, by the identity of what it was asked (kept, so that the identity is not reused).
    found: dict[int, tuple[object, Any]] = dataclasses.field(default_factory=dict, repr=False)

    def __repr__(self) -> str:
        return f"Version({self.name})"

    def module(self, name: str) -> types.ModuleType:
        if self.modules is None:
            return importlib.import_module(name)
        if name not in self.modules:
            raise VersionError(f"the {self.name} version has no module {name}")
        return self.modules[name]

    def counterpart(self, current: T) -> T:
        """This version's own `current`: a module, class or function of the current code (by its module and
        qualified name), or a value one of its modules defines (by the module and the name that hold it). A module,
        class or function from outside our packages is shared by both versions: itself."""
        if self.modules is None:
            return current
        if id(current) not in self.found:
            self.found[id(current)] = (current, self._find(current))
        return cast(T, self.found[id(current)][1])

    def rebound(self, function: F) -> F:
        """`function` (of the tests, a plain function or one defined in a class) with the names it takes from its
        module's globals that are modules, classes or functions of our packages resolved in this version: the same
        steps, run with this version's code. Its other globals (the model's own), defaults and closure are kept."""
        if self.modules is None:
            return function
        plain = cast(types.FunctionType, function)
        names = {
            name: self.counterpart(value)
            for name, value in plain.__globals__.items()
            if isinstance(value, types.ModuleType | type | types.FunctionType)
        }
        rebound = types.FunctionType(
            plain.__code__, {**plain.__globals__, **names}, plain.__name__, plain.__defaults__, plain.__closure__
        )
        rebound.__kwdefaults__ = plain.__kwdefaults__
        return cast(F, rebound)

    def _find(self, current: object) -> object:
        if isinstance(current, types.ModuleType):
            return self.module(current.__name__) if _versioned(current.__name__) else current
        module_name = getattr(current, "__module__", None)
        qualified = getattr(current, "__qualname__", None)
        if isinstance(current, type | types.FunctionType) and isinstance(module_name, str):
            if not _versioned(module_name):
                return current
            found: Any = self.module(module_name)
            for part in str(qualified).split("."):
                found = getattr(found, part)
            return found
        module_name, name = _definition(current)
        return getattr(self.module(module_name), name)


#: The code this process imports: the tree under test.
CURRENT = Version("current")


def _definition(value: object) -> tuple[str, str]:
    """Where the current code defines `value` at module level: (module, name). The module that holds it under the
    same name as its other holders is its definition's (re-exports keep the name)."""
    holders = sorted(
        (module_name, name)
        for module_name, module in list(sys.modules.items())
        if _versioned(module_name) and module is not None
        for name, held in vars(module).items()
        if held is value and not name.startswith("__")
    )
    if not holders:
        raise VersionError(f"{value!r} is defined by no module of {', '.join(PACKAGES)}: no version of it to find")
    return holders[0]


def load(root: pathlib.Path, *, name: str) -> Version:
    """The packages `PACKAGES` of the tree at `root` (as `git archive` lays it out), imported as a version of their
    own: every module of them but their entry points (`__main__`), so that none is imported later, from whatever
    `sys.modules` holds then."""
    sources = {package: source for source in baselines.package_sources(root) for package in _packages_in(source)}
    if missing := set(PACKAGES) - set(sources):
        raise VersionError(f"{root} has no package {sorted(missing)}")
    for source in sources.values():
        _refuse_late_imports(source)
    current = {module_name: module for module_name, module in sys.modules.items() if _versioned(module_name)}
    path = list(sys.path)
    try:
        for module_name in current:
            del sys.modules[module_name]
        sys.path[:0] = [str(source) for source in sorted(set(sources.values()))]
        importlib.invalidate_caches()
        for package in PACKAGES:
            for module_name in _modules_of(package, sources[package]):
                importlib.import_module(module_name)
        loaded = {module_name: module for module_name, module in sys.modules.items() if _versioned(module_name)}
    finally:
        for module_name in [module_name for module_name in sys.modules if _versioned(module_name)]:
            del sys.modules[module_name]
        sys.modules.update(current)
        sys.path[:] = path
        importlib.invalidate_caches()
    _check_isolated(loaded, root, current)
    return Version(name, types.MappingProxyType(loaded))


def _packages_in(source: pathlib.Path) -> list[str]:
    return [found.name for found in source.iterdir() if found.name in PACKAGES and (found / "__init__.py").exists()]


def _modules_of(package: str, source: pathlib.Path) -> Iterator[str]:
    yield package
    for found in pkgutil.walk_packages([str(source / package)], prefix=f"{package}."):
        if found.name.rpartition(".")[2] != "__main__":
            yield found.name


def _refuse_late_imports(source: pathlib.Path) -> None:
    """An import inside a function runs when the function is called, from the `sys.modules` of that moment, which
    holds the current code: a version's code calling it would run the current code's module. Refused, but where the
    function is one no model runs (`LATE_IMPORTS`)."""
    for path in sorted(source.rglob("*.py")):
        module_name = ".".join(path.relative_to(source).with_suffix("").parts)
        if not _versioned(module_name) or module_name in LATE_IMPORTS:
            continue
        tree = ast.parse(path.read_text(), str(path))
        top = {id(node) for node in tree.body}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Import | ast.ImportFrom) or id(node) in top:
                continue
            named = [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if (isinstance(node, ast.ImportFrom) and node.level > 0) or any(_versioned(found) for found in named):
                raise VersionError(
                    f"{path}:{node.lineno}: an import inside a function would import the current code's module; "
                    "move it to the top of the module, or name the module in versions.LATE_IMPORTS if no model runs it"
                )


def _check_isolated(
    loaded: Mapping[str, types.ModuleType], root: pathlib.Path, current: Mapping[str, types.ModuleType]
) -> None:
    """Every module loaded comes from `root`, and none of them holds a module of the current code."""
    resolved = root.resolve()
    for module_name, module in loaded.items():
        where = pathlib.Path(module.__file__ or "").resolve()
        if not where.is_relative_to(resolved):
            raise VersionError(f"{module_name} was loaded from {where}, not from {root}")
        for name, held in vars(module).items():
            if isinstance(held, types.ModuleType) and any(held is other for other in current.values()):
                raise VersionError(f"{module_name}.{name} is the current code's {held.__name__}")


@functools.cache
def baseline() -> Version:
    """The controllers as they were at `mnnvl_testbed.baseline.UPGRADE_BASELINE`, loaded once per process."""
    return load(baselines.tree(), name=f"baseline {baselines.UPGRADE_BASELINE[:7]}")
