"""Communication traces: recorded from a job (capture.record), read from the suite's own files,
PyTorch's execution traces or PARAM's comms traces (formats), and replayed (replay.py)."""

from .capture import record

__all__ = ["record"]
