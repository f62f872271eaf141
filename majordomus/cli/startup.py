"""What keeps a command's start-up short: typer without pydantic, lean help, no collector,
Redis without PyJWT.

A one-step `majordomus run` is over in well under a second, most of it start-up, and
`majordomus --help` is start-up alone; these costs of it are not the command's own work,
and this module removes them.

- typer converts every parameter's value through a pydantic `TypeAdapter`, built the first
  time the parameter is processed, even a `str` option left unset; importing pydantic for
  that alone makes a one-step `run` take a quarter longer. `PlainCommand` and `PlainGroup` give each of
  their parameters a conversion that answers by itself where typer's would be the identity
  (the text of a `str`, a bool, a number's own default, an enum's member or one of its
  values) and hands anything else to typer's own conversion, built on first use as typer
  builds it: every value a command receives and every error it reports stay typer's. (A
  typer that converts through click, as older ones do, is left as it is.)
- typer draws help with rich through `typer.rich_utils`, which imports `rich.markdown`
  (markdown-it) and `rich.traceback` (pygments) at its top, for help written in Markdown
  and for pretty tracebacks, neither of which this CLI shows, and which would make
  `majordomus --help` take a quarter to a half longer. `rich_help_formatter` imports it with stand-ins for those two
  names, each importing its real module the first time it is used, so the help is drawn
  by typer's own code, exactly as ever, without loading what it does not draw with.
- redis-py's `redis.auth.token`, imported with the client, imports PyJWT at its top, and
  with it cryptography's X.509 and key classes: a third of what importing redis costs, for
  the token-based re-authentication of Entra ID and the like, which no command uses unless
  its Redis asks for it. `import_on_use` has that module run with a stand-in for PyJWT,
  which imports the real one the first time the module uses it (`IMPORTED_ON_USE`); no
  other module ever sees the stand-in.
- Start-up makes some fifty thousand objects that live until the process ends (modules,
  classes, the registry); the cyclic collector examines them again and again while they
  are made, and once more, all of them, as the interpreter shuts down. `starting` turns
  the collector off while a command starts; `collecting` freezes what start-up made (the
  collector never examines it again) and turns the collector back on, where a command
  begins to run for long (following an execution, watching, serving); `ending` freezes
  everything before the interpreter shuts down.

Nothing here changes what a command accepts, shows or does.
"""

from __future__ import annotations

import enum
import gc
import importlib
import sys
import types
from dataclasses import dataclass, field
from typing import Any

from typer.core import TyperCommand, TyperGroup

try:
    from typer._coercion import RuntimeParam, TypeDescriptor, build_runtime_param
    from typer._param_types import coerce_cli_choice
except ImportError:  # a typer that converts values through click: nothing to spare
    CONVERTS_THROUGH_PYDANTIC = False
else:
    CONVERTS_THROUGH_PYDANTIC = True

_NUMBERS = (int, float)

if CONVERTS_THROUGH_PYDANTIC:

    @dataclass(frozen=True)
    class PlainConversion(RuntimeParam):
        """A parameter's conversion where it is the identity; typer's own otherwise."""

        descriptor: TypeDescriptor
        full: list[RuntimeParam] = field(default_factory=list, compare=False)
        """typer's conversion, once it was needed (built as typer builds it, on first use)."""

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            kind = self.annotation
            if type(value) is kind and kind in (str, bool):
                return value
            if type(value) is kind and kind in _NUMBERS and _unbounded(self.descriptor):
                return value  # a number's own default, as typed in the signature
            if isinstance(kind, type) and issubclass(kind, enum.Enum):
                member = _member(kind, value, self.descriptor, ctx)
                if member is not None:
                    return member
            return self._typers()._coerce_value(value, param=param, ctx=ctx)

        def _typers(self) -> RuntimeParam:
            if not self.full:
                self.full.append(build_runtime_param(self.descriptor))
            return self.full[0]


def _unbounded(descriptor: Any) -> bool:
    info = descriptor.parameter_info
    return info.min is None and info.max is None and not info.clamp


def _member(kind: type[enum.Enum], value: Any, descriptor: Any, ctx: Any) -> Any:
    """The member `value` names, as typer's choice conversion finds it; None when it names
    none (typer's conversion then says so, in its words)."""
    choices = list(kind)
    if any(value is choice for choice in choices):
        return value
    try:
        return coerce_cli_choice(
            value,
            choices=choices,
            case_sensitive=descriptor.parameter_info.case_sensitive,
            ctx=ctx,
        )
    except ValueError:
        return None


def plain_conversion(param: Any) -> Any:
    """Give a typer parameter `PlainConversion`, unless it converted a value already (one read
    from a file, or with a parser of its own, keeps typer's); answers the parameter."""
    if not CONVERTS_THROUGH_PYDANTIC:
        return param
    descriptor = getattr(param, "type_descriptor", None)
    if descriptor is None or getattr(param, "_runtime_param", True) is not None:
        return param
    if descriptor.file_annotation is not None or descriptor.parameter_info.parser is not None:
        return param
    param._runtime_param = PlainConversion(
        parameter_info=descriptor.parameter_info,
        annotation=descriptor.annotation,
        descriptor=descriptor,
    )
    return param


class PlainCommand(TyperCommand):
    """A typer command whose parameters, `--help` included, convert by `PlainConversion`,
    and whose help imports `rich_help_formatter`."""

    def get_params(self, ctx: Any) -> list[Any]:
        return [plain_conversion(param) for param in super().get_params(ctx)]

    def format_help(self, ctx: Any, formatter: Any) -> None:
        rich_help_formatter()
        super().format_help(ctx, formatter)


class PlainGroup(TyperGroup):
    """A typer group whose own parameters (`--help`, and the app's completion options,
    which typer adds once the group is made) convert by `PlainConversion`, and whose help
    imports `rich_help_formatter`."""

    def get_params(self, ctx: Any) -> list[Any]:
        return [plain_conversion(param) for param in super().get_params(ctx)]

    def format_help(self, ctx: Any, formatter: Any) -> None:
        rich_help_formatter()
        super().format_help(ctx, formatter)


FORMATTER = "typer.rich_utils"
NOT_DRAWN_WITH = {"rich.markdown": "Markdown", "rich.traceback": "Traceback"}
"""What `typer.rich_utils` imports at its top and uses only for Markdown help and pretty
tracebacks: the module, and the one name it takes from it."""


def rich_help_formatter() -> types.ModuleType:
    """`typer.rich_utils`, imported (once) with a stand-in for each name of
    `NOT_DRAWN_WITH` whose module is not loaded yet; a typer that takes more from those
    modules is imported as it is, whole."""
    loaded = sys.modules.get(FORMATTER)
    if loaded is not None:
        return loaded
    stand_ins = {
        module: _stand_in_module(module, name)
        for module, name in NOT_DRAWN_WITH.items()
        if module not in sys.modules
    }
    sys.modules.update(stand_ins)
    try:
        return importlib.import_module(FORMATTER)
    except ImportError:
        sys.modules.pop(FORMATTER, None)
        _drop(stand_ins)
        return importlib.import_module(FORMATTER)
    finally:
        _drop(stand_ins)


def _drop(stand_ins: dict[str, types.ModuleType]) -> None:
    for module, stand_in in stand_ins.items():
        if sys.modules.get(module) is stand_in:
            del sys.modules[module]


def _stand_in_module(module: str, name: str) -> types.ModuleType:
    """A module holding `name` alone, as a class that is the real one on first use: called,
    it makes the real one's instance; asked for an attribute, it answers the real one's."""

    def real() -> Any:
        return getattr(importlib.import_module(module), name)

    class Later(type):
        def __getattr__(cls, attribute: str) -> Any:
            return getattr(real(), attribute)

    def make(cls: type, *args: Any, **kwargs: Any) -> Any:
        return real()(*args, **kwargs)

    stand_in = types.ModuleType(module, f"Stands in for {module} until {name} is used.")
    setattr(stand_in, name, Later(name, (), {"__new__": make, "__module__": module}))
    return stand_in


IMPORTED_ON_USE = {"redis.auth.token": ("jwt",)}
"""Modules that a library the CLI uses imports at its top with a bare `import` but needs only
for work no command of the CLI does, by the module importing them: redis-py's
`redis.auth.token` imports PyJWT (and through it cryptography's X.509 and key classes), a
third of what importing redis costs, for the token-based re-authentication of Entra ID and
the like, which it reaches as `jwt.decode(...)` when it re-authenticates."""


class _ImportedOnUse(types.ModuleType):
    """Stands in for a module (in the one module that imports it, `IMPORTED_ON_USE`) until
    one of its attributes is asked for: then the real module is imported and answers it."""

    def __getattr__(self, attribute: str) -> Any:
        name = self.__name__
        if sys.modules.get(name) is self:
            del sys.modules[name]
        return getattr(importlib.import_module(name), attribute)


class _StandInsWhileImporting:
    """A finder for the modules of `IMPORTED_ON_USE`, each found as the rest of
    `sys.meta_path` finds it and run by its own loader, with a stand-in for each module it
    imports on use in `sys.modules` while it runs, gone once it has run (the module's spec
    and loader are then its own again): nothing else ever sees a stand-in. Off once each
    of them was imported."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        on_use = IMPORTED_ON_USE.get(name)
        if on_use is None:
            return None
        spec = None
        for finder in sys.meta_path:
            if finder is not self and hasattr(finder, "find_spec"):
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
        if all(module in sys.modules for module in IMPORTED_ON_USE if module != name):
            _stop_finding()
        if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _StandInsLoader(spec.loader, on_use)  # type: ignore[assignment]
        return spec


class _StandInsLoader:
    """A module's own loader, running it with stand-ins for `on_use`; anything else asked of
    it (the source, for a traceback) is the module's own loader's."""

    def __init__(self, loader: Any, on_use: tuple[str, ...]) -> None:
        self.loader = loader
        self.on_use = on_use

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self.loader, attribute)

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        stand_ins: dict[str, types.ModuleType] = {
            name: _ImportedOnUse(name) for name in self.on_use if name not in sys.modules
        }
        sys.modules.update(stand_ins)
        try:
            self.loader.exec_module(module)
        finally:
            _drop(stand_ins)
            if module.__spec__ is not None:
                module.__spec__.loader = self.loader
            module.__loader__ = self.loader


_FINDER = _StandInsWhileImporting()


def _stop_finding() -> None:
    if _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)


def import_on_use() -> None:
    """From now on, the modules of `IMPORTED_ON_USE` import what they import on use (once
    each, when they are first imported): a command that never uses PyJWT never loads it,
    one that does gets the real module, from its first use on."""
    if _FINDER not in sys.meta_path and any(m not in sys.modules for m in IMPORTED_ON_USE):
        sys.meta_path.insert(0, _FINDER)


_turned_off = False
"""Whether `starting` turned the collector off and nothing has turned it back on yet."""


def starting() -> None:
    """The collector off while a command starts (`collecting` turns it back on)."""
    global _turned_off
    if gc.isenabled():
        gc.disable()
        _turned_off = True


def collecting() -> None:
    """From here on the command may run for long: what it made so far is frozen, never to
    be examined again, and the collector is on for what it makes from now. Nothing when
    `starting` did not turn it off (a command run in another program, a test's, say)."""
    global _turned_off
    if _turned_off:
        _turned_off = False
        gc.freeze()
        gc.enable()


def ending() -> None:
    """Before the interpreter shuts down (`main` ends, the process with it): everything
    frozen, so its last collection has nothing to examine, and the collector as it was."""
    global _turned_off
    gc.freeze()
    if _turned_off:
        _turned_off = False
        gc.enable()
