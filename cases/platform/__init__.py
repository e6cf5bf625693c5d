"""Platform conformance cases: does this GPU's graph runtime do what graph replay needs?

GPU-only modules register their cases only when `torch.cuda.is_available()` at import (their ops are CUDA/HIP
custom ops); on the CPU backend they simply do not exist. See each module's note for how its cases run.
"""
