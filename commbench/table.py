"""What rank 0 prints: the table on stdout (SPEC §6: header, rows, units) and notes on stderr.

Every line goes out in one write, so lines of ranks that share a pipe never interleave.
"""

import os
import sys

from .errors import PROG, BenchmarkError, OutputClosed


def emit(stream, line):
    """One line in one write, so that lines of several ranks sharing a pipe never interleave."""
    stream.write(line + "\n")
    stream.flush()


def print_rank_0(comm, message):
    if comm.global_rank == 0:
        emit_or_stop(comm, sys.stdout, message, "the table")


def note(comm, message):
    """A diagnostic on stderr, from rank 0."""
    if comm.global_rank == 0:
        emit_or_stop(comm, sys.stderr, f"{PROG}: {message}", "a note")


def emit_or_stop(comm, stream, line, what):
    """emit(), and when the stream fails (a closed pipe, a full disk), this rank's reason to stop,
    which the ranks agree on before the next size (guard.agree_to_go_on): a rank that stopped
    on its own would leave the others failing in their next collective."""
    try:
        emit(stream, line)
    except OSError as error:
        comm.stop_on(output_failure(error, stream, what))


def output_failure(error, stream, what):
    """The error a failed write of `what` to `stream` ends the run with; nothing more is written
    to that stream (its descriptor then points to /dev/null, so even the flush at exit is quiet)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
    if isinstance(error, BrokenPipeError):
        return OutputClosed()
    name = "stdout" if stream is sys.stdout else "stderr"
    return BenchmarkError(f"cannot write {what} to {name}: {error.strerror or error}",
                          rank_local=True)


def convert_size(size_bytes):
    """1024-based human size as the original prints it: 8.0 B, 32.0 KB, 1.5 MB."""
    if size_bytes == 0:
        return "0B"
    names = ("B", "KB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB")
    index = 0
    while size_bytes >= 1024 ** (index + 1) and index < len(names) - 1:
        index += 1
    shown = round(size_bytes / 1024 ** index, 2)
    # 1048572 B: 1.0 MB, as its neighbours, not 1024.0 KB
    if shown >= 1024 and index < len(names) - 1:
        index += 1
        shown = round(size_bytes / 1024 ** index, 2)
    return f"{shown} {names[index]}"


def get_metric_strings(args, tput, busbw, duration):
    """Throughput, BusBW and Duration as printed; a bandwidth of None (barrier) is '-'."""
    duration_us = duration * 1e6
    if args.raw:
        duration_text = f"{duration_us:.3f}"
    elif duration_us < 1e3:
        duration_text = f"{duration_us:.3f} us"
    else:
        duration_text = f"{duration * 1e3:.3f} ms"
    return ("-" if tput is None else f"{tput / 1e9:.3f}",
            "-" if busbw is None else f"{busbw / 1e9:.3f}", duration_text)


def extra_columns(args):
    """(title, width) of the columns after BusBW: --peak's, the op's own, --time-budget's trial
    count, --repeat's interval (--precision's, and its window count), --stats figures,
    --overlap's, then --check's Wrong."""
    unit = " (us)" if args.raw else ""
    adaptive = args.precision is not None
    # --peak: BusBW's share of the bound (docs/peak.md); --raw: as a fraction
    columns = [("Of peak" if args.raw else "% of peak", 10)] if args.peak is not None else []
    columns += list(args.op_columns)  # the op's own (pt2pt's pairs: Msgs/s)
    if args.time_budget and not adaptive:
        columns.append(("Trials", 10))
    if args.repeat > 1 or adaptive:
        columns.append(("±95% CI", 10))
    if adaptive:
        columns.append(("Windows", 10))
    if args.stats:
        # Slowest: the straggler's rank, or rank@host when the run spans hosts
        columns += [(f"Median{unit}", 20), (f"P99{unit}", 20), ("Slowest", 20)]
    if args.overlap:
        columns += [(f"Comm{unit}", 20), (f"Compute{unit}", 20), (f"Overlapped{unit}", 20),
                    ("Overlap %", 10)]
    if args.check_every:
        # --check-every: a trial of the checked window (Duration stays the unchecked one's)
        columns.append((f"Checked{unit}", 20))
    if args.check:
        columns.append(("Wrong", 10))
    return columns


def header_text(args, op_name, world_size, qualifiers=()):
    """A blank line, the op's title line, the column line and a line of dashes. `qualifiers`
    follow the device count in the title when the run has them (`dtype bfloat16`, `op max`).

    The original's table (SPEC §6) keeps its lines: the title and 57 dashes, a rule of 100;
    qualifiers take the place of dashes (3 at least), so the title grows no longer. A table
    with columns after BusBW is wider: its title line and rule span its column line."""
    duration = "Duration (us)" if args.raw else "Duration"
    tput, busbw = f"Throughput ({args.bw_unit})", f"BusBW ({args.bw_unit})"
    extra = "".join(f" {title:{width}s}" for title, width in extra_columns(args))
    columns = (f"{'Size (Bytes)':20s} {'Description':25s} {duration:20s} {tput:20s} "
               f"{busbw:20s}{extra}")
    bare = f"---- Performance of {op_name} on {world_size} devices "
    title = bare[:-1] + "".join(f", {q}" for q in qualifiers) + " "
    width = len(columns.rstrip()) if extra else 100
    title_width = len(columns.rstrip()) if extra else len(bare) + 57
    return (f"\n{title}" + "-" * max(3, title_width - len(title)) + f"\n{columns}\n" +
            "-" * width)


def print_header(args, op_name, world_size, comm, qualifiers=()):
    print_rank_0(comm, header_text(args, op_name, world_size, qualifiers))


def print_row(args, comm, size, description, duration, tput, busbw, extra=()):
    """One row; `extra` holds the texts of the columns after BusBW, in extra_columns order."""
    tput_text, busbw_text, duration_text = get_metric_strings(args, tput, busbw, duration)
    size_text = str(size) if args.raw else convert_size(size)
    tail = "".join(f" {text:{width}s}" for text, (_, width) in zip(extra, extra_columns(args)))
    print_rank_0(comm, f"{size_text:<20} {description:25s} {duration_text:20s} "
                       f"{tput_text:20s} {busbw_text:20s}{tail}")


def duration_text(args, seconds):
    return get_metric_strings(args, 0, 0, seconds)[2]
