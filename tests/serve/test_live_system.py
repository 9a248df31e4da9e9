"""seglog deployed as a team runs it, on one log directory at once: a writer (``seglog append`` in a
loop), the maintenance daemon rolling and deleting within seconds, ``seglog serve`` and three real
consumers (confluent-kafka and kafka-python in consumer groups, ``kcat`` tailing), with the writer and
the daemon SIGKILLed at random moments (fixed seed) and restarted, and the server SIGKILLed once and
restarted. What the consumers received must be what was committed (``live_system.check_consumer``).
``python -m tests.serve.live_system WORKDIR --seconds 120`` runs it longer (``--writer run``: with
``seglog run`` as the writer)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.budget import scaled
from tests.serve.live_system import deploy_and_check

pytestmark = pytest.mark.slow


def test_consumers_see_exactly_the_committed_records_through_writer_daemon_and_server_crashes(tmp_path: Path) -> None:
    problems = deploy_and_check(tmp_path, seconds=scaled(35, ci=35, soak=600), seed=3, say=lambda _: None)
    assert not problems, "\n".join(problems)
