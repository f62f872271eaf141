"""Filling the process's registry: the built-ins first, then each module the user names.

The built-ins (`majordomus.builtins`) are imported here exactly as a user's module is,
so the registry itself imports no capability and declaring one never goes in a circle.

The modules of `MAJORDOMUS_CAPABILITIES` are looked for on `sys.path` and in the current
folder: the `majordomus` console script, unlike `python -m`, does not put the folder it
was started from on `sys.path`, and a newcomer's `greetings.py` sits right there. The
folder goes last, so a stray file in it never shadows an installed package. This module
does not reload a module, nor catch what a module raises besides `ImportError` (a
syntax error or a conflicting declaration keeps its traceback).
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback

from majordomus.builtins import MODULES as BUILTIN_MODULES
from majordomus.registry import REGISTRY, Registry

VARIABLE = "MAJORDOMUS_CAPABILITIES"


class CapabilitiesNotLoaded(SystemExit):
    """A module named in `MAJORDOMUS_CAPABILITIES` could not be imported: start-up stops
    with one line naming the variable, the module, the folder it was looked for in and the
    import's own error (also kept as `__cause__`). A `SystemExit`, as a bad setting is
    (`majordomus.config`), so every process command stops with that line, not a traceback."""

    def __init__(self, module: str, folder: str, cause: ImportError) -> None:
        self.module = module
        self.folder = folder
        super().__init__(_explain(module, folder, cause))


def load_capabilities(modules: list[str]) -> Registry:
    """Import the built-ins and each user module; a bad module name stops start-up clearly."""
    for name in BUILTIN_MODULES:
        importlib.import_module(name)
    if modules:
        _add_current_folder()
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise CapabilitiesNotLoaded(name, os.getcwd(), exc) from exc
    return REGISTRY


def _add_current_folder() -> None:
    """Put the current folder at the end of `sys.path`, unless it is on it already."""
    folder = os.getcwd()
    on_path = {os.path.abspath(entry or os.curdir) for entry in sys.path}
    if folder not in on_path:
        sys.path.append(folder)


def _explain(module: str, folder: str, cause: ImportError) -> str:
    missing = (
        isinstance(cause, ModuleNotFoundError)
        and cause.name is not None
        and (module == cause.name or module.startswith(cause.name + "."))
    )
    if missing:
        return (
            f"majordomus: cannot load capabilities from {module!r} ({cause}), named in "
            f"{VARIABLE}: it was looked for in the current folder ({folder}) and on "
            f"sys.path; start from the folder that holds {module.split('.')[0]}.py, "
            f"install it, or correct {VARIABLE}"
        )
    return (
        f"majordomus: cannot load capabilities from {module!r}, named in {VARIABLE}: "
        f"importing it failed{_where(cause)}: {type(cause).__name__}: {cause} "
        f"(current folder: {folder}); install what it imports, or correct {VARIABLE}"
    )


def _where(cause: BaseException) -> str:
    """` at FILE:LINE`: the last line of the user's code the failed import went through."""
    ours = {__file__, importlib.__file__}
    frames = [
        f
        for f in traceback.extract_tb(cause.__traceback__)
        if not f.filename.startswith("<") and f.filename not in ours
    ]
    if not frames:  # the import failed before any of the user's code ran
        return ""
    return f" at {frames[-1].filename}:{frames[-1].lineno}"
