"""promtool cases, one module per area whose cases outgrew its declarations."""
