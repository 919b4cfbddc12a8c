"""pod_exec_runner: an exec whose error channel holds no exit status is a failed command, not a crash.

The API server answers so when the container goes away during the exec (its namespace being
deleted): the kubernetes client's `returncode` then raises ValueError on
'unable to upgrade connection: container not found ("slurmctld")'. The stream is replaced by a
stand-in that answers as the client does (kubernetes.stream.ws_client.WSClient's methods used).
"""

import kubernetes.stream

from kubeslurm.reconcile.slurm_control import pod_exec_runner


class GoneContainerStream:
    closed = False

    def run_forever(self, timeout):
        pass

    def read_stdout(self):
        return ""

    def read_stderr(self):
        return ""

    @property
    def returncode(self):
        return int('unable to upgrade connection: container not found ("slurmctld")')

    def close(self):
        self.closed = True


def test_an_exec_into_a_container_that_is_gone_is_a_failed_command(monkeypatch):
    stream = GoneContainerStream()
    monkeypatch.setattr(kubernetes.stream, "stream", lambda *args, **kwargs: stream)
    run = pod_exec_runner(kubernetes.client.ApiClient(), "bench", "research-controller-0", "slurmctld")
    result = run(["scontrol", "show", "nodes"])
    assert result.returncode == 1 and stream.closed
    assert 'container not found ("slurmctld")' in result.stderr
