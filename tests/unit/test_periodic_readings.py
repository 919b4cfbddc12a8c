"""sdiag and df of the state volume are read at most every READ_EVERY_SECONDS per cluster
(reconcile/periodic_readings.py), not at every reconcile of a burst of pod events."""

import subprocess

import pytest

from kubeslurm.reconcile.cluster_reconcile import ClusterReconciler
from kubeslurm.reconcile.periodic_readings import READ_EVERY_SECONDS, PeriodicReadings
from kubeslurm.reconcile.run_state import Run
from kubeslurm.reconcile.slurm_control import SlurmCommandError, SlurmControl

from .manifests import contract_documents, load_with_uids
from .test_sdiag import SDIAG

CLUSTER, GPU_NODES, CPU_NODES = contract_documents()


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class Slurm:
    """Answers like slurmctld's pod: sdiag with Slurm 24.11's text, df from this machine's real
    `df` (of /, for the state volume's path); nodes and jobs: none. Records every command."""

    def __init__(self):
        self.calls: list[str] = []
        self.failing: set[str] = set()

    def __call__(self, argv, timeout=60):
        program = argv[0] if argv[0] != "env" else argv[2]
        self.calls.append(program)
        if program in self.failing:
            return subprocess.CompletedProcess(argv, 1, "", f"{program}: Unable to contact slurm controller")
        if program == "sdiag":
            return subprocess.CompletedProcess(argv, 0, SDIAG, "")
        if program == "df":
            return subprocess.run([*argv[:-1], "/"], capture_output=True, text=True, timeout=timeout)
        return subprocess.CompletedProcess(argv, 0, "", "")


def reconciler(clock) -> ClusterReconciler:
    reconciler = ClusterReconciler(api=None, slurm_for=None, events=None)
    reconciler.periodic_readings = PeriodicReadings(clock=clock)
    return reconciler


def run_for(slurm: Slurm, namespace="hpc") -> Run:
    cluster, _ = load_with_uids(CLUSTER, GPU_NODES, CPU_NODES)
    cluster.metadata.namespace = namespace
    return Run(raw={"metadata": {"name": cluster.metadata.name, "namespace": namespace}}, cluster=cluster,
               slurm=SlurmControl(slurm))


def test_a_burst_of_reconciles_reads_sdiag_and_df_once_then_again_after_the_period():
    clock, slurm = Clock(), Slurm()
    reading = reconciler(clock)
    first = run_for(slurm)
    reading.read_slurm(first)
    assert slurm.calls == ["scontrol", "squeue", "sdiag", "df"]
    assert first.scheduler_statistics and first.state_volume.size_bytes > 0

    for _ in range(5):  # a scale of many pods: a reconcile a second
        clock.now += 1.5
        run = run_for(slurm)
        reading.read_slurm(run)
        # the same answers given on; nodes and jobs are read every time
        assert (run.scheduler_statistics, run.state_volume) == (first.scheduler_statistics, first.state_volume)
    assert slurm.calls.count("scontrol") == slurm.calls.count("squeue") == 6
    assert slurm.calls.count("sdiag") == slurm.calls.count("df") == 1

    clock.now += READ_EVERY_SECONDS
    reading.read_slurm(run_for(slurm))
    assert slurm.calls.count("sdiag") == slurm.calls.count("df") == 2


def test_a_failed_reading_is_not_kept_and_each_cluster_reads_its_own():
    clock, slurm = Clock(), Slurm()
    reading = reconciler(clock)
    slurm.failing = {"sdiag"}
    run = run_for(slurm)
    reading.read_slurm(run)
    assert run.scheduler_statistics is None and run.state_volume is not None  # the reconcile goes on
    slurm.failing = set()
    clock.now += 1
    run = run_for(slurm)
    reading.read_slurm(run)
    assert run.scheduler_statistics  # asked again at once, not READ_EVERY_SECONDS later
    assert slurm.calls.count("sdiag") == 2 and slurm.calls.count("df") == 1

    reading.read_slurm(run_for(slurm, namespace="other"))  # another cluster's readings are its own
    assert slurm.calls.count("sdiag") == 3 and slurm.calls.count("df") == 2


def test_a_deleted_cluster_s_readings_are_forgotten():
    clock = Clock()
    readings = PeriodicReadings(clock=clock)
    answers = iter(range(10))
    assert readings.fresh("hpc", "research", "sdiag", lambda: next(answers)) == 0
    assert readings.fresh("hpc", "research", "sdiag", lambda: next(answers)) == 0
    readings.forget("hpc", "research")
    assert readings.fresh("hpc", "research", "sdiag", lambda: next(answers)) == 1


def test_an_exception_passes_through_and_keeps_nothing():
    readings = PeriodicReadings(clock=Clock())

    def failing():
        raise SlurmCommandError("sdiag failed")

    with pytest.raises(SlurmCommandError):
        readings.fresh("hpc", "research", "sdiag", failing)
    assert readings.fresh("hpc", "research", "sdiag", lambda: "answer") == "answer"
