"""majordomus' worker behind the peers' gate, run by the peers scenario with this repo's
python (not a venv of its own).

`majordomus_side.py worker --concurrency 10` builds the worker `majordomus worker
--max-jobs 10` builds (its settings from `MAJORDOMUS_*`, the run's capabilities
`bench.capabilities`), says `loaded`, waits for the round's gate file and runs it. It does
not count jobs: the scenario reads majordomus' own index of finished executions.
"""

from __future__ import annotations

import wire

from majordomus.config import settings
from majordomus.workers.worker import build_worker

if __name__ == "__main__":
    arguments = wire.arguments()
    worker = build_worker(settings(), max_jobs=arguments.concurrency)
    wire.say(loaded=True)
    wire.wait_gate()
    worker.run()
