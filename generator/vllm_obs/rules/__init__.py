"""Prometheus recording rules, alerting rules, their promtool tests and runbooks."""
