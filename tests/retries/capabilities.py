"""The retry scenarios' capabilities, declared in the process registry of the worker and API
processes that load this module (`MAJORDOMUS_CAPABILITIES=...,tests.retries.capabilities`).
The test process itself never imports it: see `tests.retries.workload`."""

from majordomus.registry import REGISTRY
from tests.retries.workload import declare

declare(REGISTRY)
