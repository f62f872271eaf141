"""Handlers that run in child processes of the worker (`@capability(..., runs_in="process")`).

A capability declared so runs each execution in a child process of its worker, from a pool
kept warm per capability (`pool.ChildPool`): a handler that hangs, leaks, segfaults or is
OOM-killed costs its child, never the worker and its other executions. The child reports
through a context of its own (`child.ChildContext`) whose every report the worker applies to
the execution's real context, so the events, their order, the back-pressure and the
redaction are the loop's (`wire` is what goes between them). A child is started with
`forkserver` (or `spawn`: `MAJORDOMUS_CHILD_START`), imports the handler's module, runs one
execution at a time, and is recycled after `MAJORDOMUS_CHILD_MAX_EXECUTIONS` executions or
once its resident memory passes `MAJORDOMUS_CHILD_MAX_MEMORY_MB`.
"""
