"""The latest Slurm-state samples of every cluster, served as gauges at each scrape.

Each reconcile replaces its cluster's samples whole (publish), so a NodeSet, partition
or account that went away takes its series with it; a deleted cluster's go too (forget).
"""

import threading

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import REGISTRY, Collector

from .slurm_state import FAMILIES, Sample

CLUSTER_LABELS = ("namespace", "cluster")


class ClusterStateCollector(Collector):
    def __init__(self):
        self._samples: dict[tuple[str, str], list[Sample]] = {}
        self._lock = threading.Lock()

    def publish(self, namespace: str, cluster: str, samples: list[Sample]) -> None:
        with self._lock:
            self._samples[(namespace, cluster)] = list(samples)

    def forget(self, namespace: str, cluster: str) -> None:
        with self._lock:
            self._samples.pop((namespace, cluster), None)

    def collect(self):
        with self._lock:
            snapshot = dict(self._samples)
        families = {
            name: GaugeMetricFamily(name, family.help, labels=[*CLUSTER_LABELS, *family.labels])
            for name, family in FAMILIES.items()
        }
        for (namespace, cluster), samples in sorted(snapshot.items()):
            for s in samples:
                families[s.name].add_metric([namespace, cluster, *(value for _, value in s.labels)], s.value)
        # Families without a sample are left out: an empty family is noise on every scrape.
        return [family for family in families.values() if family.samples]

    def describe(self):
        return []  # no fixed set of series: the registry is not to call collect() at registration


SLURM_STATE = ClusterStateCollector()
REGISTRY.register(SLURM_STATE)
