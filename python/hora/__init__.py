"""Hora: collective communication for Python. hora.torch is the Horovod-compatible API for
PyTorch; hora.torch.distributed registers the torch.distributed backend "hora"; hora._core
is the C ABI over ctypes."""
from hora._core import HoraError, version  # noqa: F401
