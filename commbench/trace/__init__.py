"""Communication traces: recorded from a job (capture.record), read from the suite's own files,
PyTorch's execution traces or PARAM's comms traces (formats), and replayed (replay.py).

`record` is imported when first asked for: the readers (formats, dscomms, ...) import this
package, and report/ reads traces without torch, which the recorder needs."""

__all__ = ["record"]


def __getattr__(name):
    if name == "record":
        from .capture import record
        return record
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
