"""The CD+GTM step on the CPU: numba kernels for the step (step.py), the GTM node test (gtm.py) and the
per-request top-k selection (select.py)."""
