"""The CD+GTM step on the GPU: CuPy RawKernels (kernels/*.cu), the backend that uploads the index and
launches them (backend.py), the captured beam search (graph.py), programmatic dependent launch (pdl.py),
GTM window calibration (windows.py), kernel parameter tables (params.py) and arrays from torch and CuPy
(interop.py)."""
