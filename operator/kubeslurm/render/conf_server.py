"""Configless Slurm clients (slurmd, sackd) and their wait for slurmctld to listen.

slurmd and the login pod's sackd fetch slurm.conf from slurmctld (`--conf-server`). Their
first fetch fails when slurmctld does not listen yet (on a new cluster every pod starts
together, and slurmctld waits for slurmdbd on its first start), and both then wait a fixed
10 s before they ask again (sackd: "Failed to load configs from slurmctld. Retrying in 10
seconds."): on `make bench` that was most of the time from `kubectl apply` to a login pod
that sees idle nodes. So their containers first wait until one of the --conf-server addresses
among their arguments accepts a TCP connection (slurmctld listens once it has loaded its state
and serves configs), polling every 0.2 s, for at most CONTROLLER_WAIT_SECONDS; the daemon's own
retries take over after that. The addresses come from the arguments ("$@"), never from the
script text: the script is the same for every cluster.
"""

from kubeslurm.render.k8s import naming

CONTROLLER_WAIT_SECONDS = 300
WAIT_FOR_CONTROLLER = (
    'servers=; previous=; for arg in "$@"; do [ "$previous" = --conf-server ] && servers=$arg; previous=$arg; done; '
    'listening() { for server in $(echo "$servers" | tr , " "); do '
    f'case $server in *:*) port=${{server##*:}};; *) port={naming.SLURMCTLD_PORT};; esac; '
    """timeout 2 bash -c 'exec 3<>"/dev/tcp/$0/$1"' "${server%:*}" "$port" 2>/dev/null && return 0; """
    'done; return 1; }; '
    f'tries=0; until listening || [ $tries -ge {CONTROLLER_WAIT_SECONDS * 5} ]; do '
    'if [ $((tries % 150)) -eq 0 ]; then echo "kubeslurm: waiting for slurmctld at $servers to listen" >&2; fi; '
    'sleep 0.2; tries=$((tries + 1)); done'
)


def once_slurmctld_listens(program: str, args: list[str]) -> list[str]:
    """A container command that runs `program args` (exec: it stays PID 1, with argv[0] =
    program, which sackd re-executes on reconfigure) after WAIT_FOR_CONTROLLER."""
    return ["/bin/sh", "-c", f'{WAIT_FOR_CONTROLLER}; exec {program} "$@"', program, *args]
