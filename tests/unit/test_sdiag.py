"""sdiag's text output read into the scheduler statistics the metrics report."""

import pytest

from kubeslurm.metrics.sdiag import KNOWN, parse_sdiag

# The shape of Slurm 24.11's `sdiag` (the real-Slurm tier parses a live one too).
SDIAG = """\
*******************************************************
sdiag output at Thu Dec 03 12:00:00 2026 (1796299200)
Data since      Thu Dec 03 00:00:00 2026 (1796256000)
*******************************************************
Server thread count:  3
RPC queue enabled:    0
Agent queue size:     2
Agent count:          0
Agent thread count:   0
DBD Agent queue size: 5

Jobs submitted: 7
Jobs started:   5
Jobs completed: 4
Jobs canceled:  1
Jobs failed:    0

Job states ts:  Thu Dec 03 12:00:00 2026 (1796299200)
Jobs pending:   1
Jobs running:   1

Main schedule statistics (microseconds):
\tLast cycle:   85
\tMax cycle:    1520
\tTotal cycles: 31
\tMean cycle:   210
\tMean depth cycle:  1
\tCycles per minute: 1
\tLast queue length: 1

Main scheduler exit:
\tEnd of job queue:31
\tHit default_queue_depth: 0

Backfilling stats
\tTotal backfilled jobs (since last slurm start): 2
\tTotal backfilled jobs (since last stats cycle start): 2
\tTotal backfilled heterogeneous job components: 0
\tTotal cycles: 12
\tLast cycle when: Thu Dec 03 11:59:58 2026 (1796299198)
\tLast cycle: 402
\tMax cycle:  1900
\tMean cycle: 350
\tLast depth cycle: 4
\tLast depth cycle (try sched): 1
\tDepth Mean: 3
\tDepth Mean (try depth): 1
\tLast queue length: 6
\tQueue length mean: 1

Backfill exit
\tEnd of job queue:12
\tHit bf_max_job_start: 0

Latency for 1000 calls to gettimeofday(): 21 microseconds

Remote Procedure Call statistics by message type
\tREQUEST_FED_INFO                        ( 2049) count:20     ave_time:118    total_time:2365

Remote Procedure Call statistics by user
\troot            (       0) count:70     ave_time:283    total_time:19833
\talice           (    1001) count:10     ave_time:100    total_time:1000

Pending RPC statistics
\tNo pending RPCs
"""


def test_every_known_statistic_is_read_from_its_own_section():
    assert parse_sdiag(SDIAG) == {
        "server_threads": 3, "agent_queue_size": 2, "dbd_agent_queue_size": 5,
        "jobs_submitted": 7, "jobs_started": 5, "jobs_completed": 4, "jobs_canceled": 1, "jobs_failed": 0,
        "main_last_cycle_us": 85, "main_max_cycle_us": 1520, "main_cycles": 31, "main_mean_cycle_us": 210,
        "main_mean_depth": 1, "main_last_queue_length": 1,
        "backfilled_jobs": 2, "backfill_cycles": 12, "backfill_last_cycle_us": 402, "backfill_max_cycle_us": 1900,
        "backfill_mean_cycle_us": 350, "backfill_last_depth": 4, "backfill_mean_depth": 3,
        "backfill_last_queue_length": 6,
    }
    assert len(KNOWN) == len(parse_sdiag(SDIAG))


@pytest.mark.parametrize(("text", "expected"), [
    ("", {}),
    # the same key in another section is not taken for the main scheduler's
    ("Backfilling stats\n\tLast cycle: 9\n", {"backfill_last_cycle_us": 9}),
    ("Main scheduler exit:\n\tLast cycle: 9\n", {}),
    # a section's key is not a top-level one and vice versa
    ("Main schedule statistics (microseconds):\n\tServer thread count: 4\n", {}),
    ("Main schedule statistics (microseconds):\nServer thread count: 4\n", {"server_threads": 4}),
    # what an exec error prints in place of sdiag's output
    ('unable to upgrade connection: container not found ("slurmctld")', {}),
    ("Main schedule statistics (microseconds):\n\tLast cycle when: Thu Dec 03 (1796299198)\n", {}),
])
def test_sections_decide_what_a_key_means(text, expected):
    assert parse_sdiag(text) == expected


def test_the_rpc_tables_naming_users_are_never_read():
    assert not any("alice" in key or "root" in key for key in parse_sdiag(SDIAG))
