"""Importing user code named ``package.module:function``: a study's objective or data set.

The import runs with the given folders in front of ``sys.path``, one import at a time in the
process. This module imports nothing else from hpsearch but its exceptions.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hpsearch.exceptions import SpecError

__all__ = ["lazy_attributes", "load_user_objective"]

_IMPORT_LOCK = threading.Lock()


@contextmanager
def _prepended_sys_path(paths: Sequence[str | Path]) -> Iterator[None]:
    saved = list(sys.path)
    sys.path[:0] = [os.path.abspath(p) for p in paths]
    for _ in range(10):
        try:
            importlib.invalidate_caches()
            break
        except RuntimeError:  # another thread imported meanwhile (the cache grew): again
            continue
    try:
        yield
    finally:
        sys.path[:] = saved


def load_user_objective(ref: str, search_paths: Sequence[str | Path]) -> Callable[..., Any]:
    """Import a user objective ``package.module:function``.

    ``search_paths`` are put in front of ``sys.path`` for the import only (``sys.path`` is
    restored afterwards; the imported module stays in ``sys.modules``). The coordinator uses
    ``[cwd, study file folder]``; a worker passes the same folders.

    Args:
        ref: ``package.module:function``; the function part may be a dotted attribute path.
        search_paths: Folders searched first.

    Returns:
        The callable.

    Raises:
        SpecError: With one line ``objective.model: <reason>``. When the import itself failed,
            the original exception (e.g. ``ModuleNotFoundError``) is its ``__cause__``.

    Example:
        >>> load_user_objective("os.path:join", [])("a", "b")
        'a/b'
    """
    module_name, _, attr_path = ref.partition(":")
    try:
        module = sys.modules.get(module_name)
        if module is None:
            # One import at a time: trials start on several threads of a worker, and the
            # sys.path change below is process-wide.
            with _IMPORT_LOCK, _prepended_sys_path(search_paths):
                module = importlib.import_module(module_name)
    except Exception as exc:
        raise SpecError(
            f"objective.model: cannot import {ref!r} ({type(exc).__name__}: {exc})"
        ) from exc
    target: Any = module
    for attr in attr_path.split("."):
        if not hasattr(target, attr):
            raise SpecError(
                f"objective.model: module {module_name!r} has no function {attr_path!r}"
            )
        target = getattr(target, attr)
    if not callable(target):
        raise SpecError(f"objective.model: {ref!r} is not callable")
    return target


def lazy_attributes(package: str, modules: Mapping[str, Sequence[str]]) -> Callable[[str], Any]:
    """A package's ``__getattr__`` (PEP 562) that imports each name it offers from the private
    module defining it, on first use.

    A room of hpsearch lists what others may use in its ``__init__`` (``__all__``, with the
    same imports under ``TYPE_CHECKING`` for type checkers) and takes them from its private
    modules only when asked: ``import hpsearch`` and ``hpsearch --help`` import no torch,
    distributed or MLflow, although the rooms they reach offer names that need them.

    Args:
        package: the package's ``__name__``.
        modules: each private module (relative, ``"._runner"``) and the names it offers.
    """
    where = {name: module for module, names in modules.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
