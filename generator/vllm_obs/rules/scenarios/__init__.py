"""promtool cases, one module per area of rules/areas/, which imports its cases from here."""
