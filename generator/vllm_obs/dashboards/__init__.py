"""Grafana dashboards: specs built from the resolved signals, rendered with grafanalib."""
