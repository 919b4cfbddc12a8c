"""Fixtures of the real-API-server tier (pytest -m k8s).

`k8s_bin_dir`, `control_plane` and `namespace` are in tests/conftest.py, shared with
tests/helm so that a session running both tiers starts one control plane.
"""
