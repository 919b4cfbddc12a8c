"""slurmctld's scheduler statistics, read from `sdiag`'s text output.

sdiag prints "Key: value" lines: unindented ones about the whole daemon (threads,
agent queues, job counters), and tab-indented ones under a section header ("Main
schedule statistics (microseconds):", "Backfilling stats", ...). Only the keys in
KNOWN are kept: the RPC tables that follow name users, which must never become labels.
"""

import re

# (section, sdiag's key) -> our name. Cycle times are in microseconds, as sdiag prints them.
KNOWN = {
    ("", "Server thread count"): "server_threads",
    ("", "Agent queue size"): "agent_queue_size",
    ("", "DBD Agent queue size"): "dbd_agent_queue_size",
    ("", "Jobs submitted"): "jobs_submitted",
    ("", "Jobs started"): "jobs_started",
    ("", "Jobs completed"): "jobs_completed",
    ("", "Jobs canceled"): "jobs_canceled",
    ("", "Jobs failed"): "jobs_failed",
    ("main", "Last cycle"): "main_last_cycle_us",
    ("main", "Max cycle"): "main_max_cycle_us",
    ("main", "Mean cycle"): "main_mean_cycle_us",
    ("main", "Total cycles"): "main_cycles",
    ("main", "Mean depth cycle"): "main_mean_depth",
    ("main", "Last queue length"): "main_last_queue_length",
    ("backfill", "Total backfilled jobs (since last slurm start)"): "backfilled_jobs",
    ("backfill", "Total cycles"): "backfill_cycles",
    ("backfill", "Last cycle"): "backfill_last_cycle_us",
    ("backfill", "Max cycle"): "backfill_max_cycle_us",
    ("backfill", "Mean cycle"): "backfill_mean_cycle_us",
    ("backfill", "Last depth cycle"): "backfill_last_depth",
    ("backfill", "Depth Mean"): "backfill_mean_depth",
    ("backfill", "Last queue length"): "backfill_last_queue_length",
}
# Section headers, by how they start; any other header opens a section we ignore.
SECTIONS = {"Main schedule statistics": "main", "Backfilling stats": "backfill"}
_STAT = re.compile(r"^(?P<key>[^:]+?):\s*(?P<value>-?\d+(\.\d+)?)\b")

SchedulerStatistics = dict[str, float]


def parse_sdiag(text: str) -> SchedulerStatistics:
    """Our name -> value of every KNOWN statistic found in `text`; missing keys stay absent."""
    stats: SchedulerStatistics = {}
    section = None
    for line in text.splitlines():
        if not line.strip() or line.startswith("*"):
            continue
        indented = line[0] in " \t"
        match = _STAT.match(line.strip())
        if not indented and match is None:
            section = next((ours for start, ours in SECTIONS.items() if line.startswith(start)), None)
            continue
        if match is None:
            continue
        where = section if indented else ""
        name = KNOWN.get((where, match["key"].strip()))
        if name is not None and name not in stats:
            stats[name] = float(match["value"])
    return stats
