"""Panel groups and shapes the dashboards share."""
