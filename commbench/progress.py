"""Progress over an op's sizes, on rank 0's stderr: tqdm's bar on a terminal; otherwise, when
stderr goes to a file or a pipe, a line whenever EVERY_S seconds have passed without one —
after a size, or in the middle of a long one — so that a redirected run is never silent for
long, and a run that seems stuck says where it is. Quick runs print none."""

import sys
import threading
import time

from .table import convert_size, note

# Seconds without a line before a progress line is due.
EVERY_S = 10.0
# Seconds a start-up step that is mostly quick may take before it says what it is doing.
SLOW_STEP_S = 3.0


def open_progress(comm, op_name, sizes, windows):
    """The progress of one op on rank 0 (None elsewhere): `sizes` the bytes per rank of each
    size in order, `windows` the windows in all (None: not known ahead, as under --precision)."""
    if comm.global_rank != 0 or not sizes:
        return None
    if sys.stderr.isatty():
        if windows is not None and windows < 2:
            return None
        try:
            from tqdm import tqdm
        except ImportError:
            return None
        return _Bar(tqdm(total=windows, desc=op_name, unit="size", leave=False, file=sys.stderr))
    return Lines(comm, op_name, sizes, windows)


class _Bar:
    """tqdm's bar, with the calls Lines takes."""

    def __init__(self, bar):
        self._bar = bar

    def begin(self, position):
        pass

    def clear(self):
        self._bar.clear()  # the row goes where the bar was; the bar is redrawn below

    def update(self):
        self._bar.update(1)

    def close(self):
        self._bar.close()


class Lines:
    """A line at most every EVERY_S seconds; a thread of rank 0 writes it when a size runs long
    (it reads what the main thread last set; nothing it does touches the process group)."""

    def __init__(self, comm, op_name, sizes, windows, every=EVERY_S, clock=time.monotonic):
        self.comm, self.op_name, self.sizes, self.windows = comm, op_name, sizes, windows
        self.every, self.clock = every, clock
        self.started = self.last_line = clock()
        self.done, self.position, self.since = 0, None, None
        self.seconds = {}  # position -> seconds its last window took
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="commbench-progress",
                                        daemon=True)
        self._thread.start()

    def begin(self, position):
        with self._lock:
            self.position, self.since = position, self.clock()

    def clear(self):
        pass

    def update(self):
        with self._lock:
            now = self.clock()
            if self.position is not None:
                self.seconds[self.position] = now - self.since
            self.done += 1
            self.position = None
            if now - self.last_line >= self.every:
                self._say(now)

    def close(self):
        self._stop.set()
        self._thread.join(timeout=5)

    def _watch(self):
        while not self._stop.wait(min(1.0, self.every / 4)):
            with self._lock:
                now = self.clock()
                if now - self.last_line >= self.every:
                    self._say(now)

    def line(self, now):
        """What the progress line says at `now`."""
        what = "size" if self.windows == len(self.sizes) else "window"
        if self.windows is not None:
            count = f"{self.done} of {self.windows} {what}s"
        else:  # --precision: windows until each size is tight enough
            count = f"{self.done} {what}{'s' if self.done != 1 else ''}"
        text = f"{self.op_name}: {count} done in {now - self.started:.1f} s"
        if self.position is not None:
            text += (f"; measuring {convert_size(self.sizes[self.position])} per rank for "
                     f"{now - self.since:.1f} s")
        left = self.estimate_left()
        if left is not None and self.position is not None:
            left = max(0.0, left - (now - self.since))  # the current size is partly done
        if left is not None:
            text += f"; about {left:.0f} s left at the last size's rate"
        return text

    def estimate_left(self):
        """Seconds the sizes not yet measured would take, each the last measured size's time
        scaled by its bytes (never below it): known only for one pass over the sizes."""
        if self.windows != len(self.sizes) or not self.seconds or self.done >= len(self.sizes):
            return None
        last = max(self.seconds)
        base, seconds = max(self.sizes[last], 1), self.seconds[last]
        return sum(seconds * max(1.0, size / base) for size in self.sizes[self.done:])

    def _say(self, now):
        self.last_line = now
        note(self.comm, self.line(now))


class SlowStep:
    """A start-up step that mostly takes a second but can take a minute (oneCCL's first start
    on a host: its libraries read from a cold disk, its transport opened): once it has taken
    `after` seconds, one line saying what it is doing (`starting`), and at its end one line
    with its time (`done`, formatted with the seconds); a quick one prints nothing. `say` is
    None on the ranks that stay quiet. Used as a context manager; a step that fails says no
    more."""

    def __init__(self, say, starting, done, after=None):
        self.say, self.starting, self.done = say, starting, done
        self.after = SLOW_STEP_S if after is None else after
        self.told = threading.Event()
        self.timer = None

    def _tell(self):
        self.told.set()
        self.say(self.starting)

    def __enter__(self):
        self.began = time.monotonic()
        if self.say is not None:
            self.timer = threading.Timer(self.after, self._tell)
            self.timer.daemon = True
            self.timer.start()
        return self

    def __exit__(self, kind, _error, _trace):
        if self.timer is not None:
            self.timer.cancel()
            self.timer.join()
        if self.told.is_set() and kind is None:
            self.say(self.done.format(time.monotonic() - self.began))
        return False
