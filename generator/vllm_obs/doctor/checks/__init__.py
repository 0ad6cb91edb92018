"""The doctor's checks, one module per family, run in order by run.py."""
