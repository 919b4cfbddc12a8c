"""Kubernetes plumbing every component uses: object metadata, labels, names, pods, StatefulSets,
pod-template merge, the config hash, Secrets, disruption budgets and Service builders."""
