"""Rendering dashboard specs as Grafana JSON and provisioning files (the only users of grafanalib)."""
