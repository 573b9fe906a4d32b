"""Import one module of a package without running the package's ``__init__``.

A package whose ``__init__`` imports everything it offers makes each of its modules cost
all of it: the OpenAI plugin's ``__init__`` imports every API it wraps (the Realtime
API's types above all), 0.45 s of CPU that a text chat, which needs the plugin's LLM
module only, would pay at every start (``bench/startup.py``).

:func:`import_submodule` imports the module under a stand-in for its package that is
never run, then takes the stand-in out of ``sys.modules`` again: the package itself is
not imported. Whatever imports it later gets it whole, as usual — its ``__init__`` runs
then, and reuses the modules already loaded (one ``llm`` module, one ``LLM`` class) —
and :class:`_BindLoaded` gives it those modules as attributes, as a plain import would
have. A module that turns out to need its package's ``__init__`` is imported the plain
way instead.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
import types
from collections.abc import Sequence

_lock = threading.Lock()


def import_submodule(package: str, name: str) -> types.ModuleType:
    """``package.name``, without ``package/__init__.py`` unless the package is imported
    already (see the module's doc)."""
    full = f"{package}.{name}"
    if package in sys.modules or full in sys.modules:
        return importlib.import_module(full)
    spec = importlib.util.find_spec(package)
    if spec is None or spec.loader is None or not spec.submodule_search_locations:
        return importlib.import_module(full)
    with _lock:
        stand_in = importlib.util.module_from_spec(spec)
        sys.modules[package] = stand_in
        try:
            module: types.ModuleType | None = importlib.import_module(full)
        except ImportError:
            module = None
        finally:
            if sys.modules.get(package) is stand_in:
                del sys.modules[package]
        sys.meta_path.insert(0, _BindLoaded(package))
    return module or importlib.import_module(full)  # (or the plain way after all)


class _BindLoaded(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``package`` (once) with the finders after it, and after its ``__init__`` has
    run binds the submodules :func:`import_submodule` loaded as its attributes."""

    def __init__(self, package: str) -> None:
        self.package = package
        self.loader: importlib.abc.Loader | None = None

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.package:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            self.loader, spec.loader = spec.loader, self
        return spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        assert self.loader is not None
        return self.loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        assert self.loader is not None and module.__spec__ is not None
        module.__loader__ = module.__spec__.loader = self.loader  # the package's own, again
        self.loader.exec_module(module)
        prefix = f"{self.package}."
        for name, loaded in list(sys.modules.items()):
            child = name.removeprefix(prefix)
            if child != name and "." not in child and not hasattr(module, child):
                setattr(module, child, loaded)
