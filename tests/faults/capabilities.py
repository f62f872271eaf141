"""The fault scenarios' capabilities, declared in the process registry of the worker and API
processes that load this module (`MAJORDOMUS_CAPABILITIES=...,tests.faults.capabilities`).
The test process itself never imports it: see `tests.faults.workload`."""

from majordomus.registry import REGISTRY
from tests.faults.workload import declare

declare(REGISTRY)
