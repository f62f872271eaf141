"""The built-in capabilities, declared with `@capability` exactly as a user's module is.

`MODULES` names them for `majordomus.loading.load_capabilities`, which imports them before
the user's modules; nothing here is imported by the registry itself.
"""

MODULES = (
    "majordomus.builtins.executions",
    "majordomus.builtins.capabilities",
    "majordomus.builtins.episodes",
    "majordomus.builtins.queue",
    "majordomus.builtins.schedules",
    "majordomus.builtins.stats",
)
