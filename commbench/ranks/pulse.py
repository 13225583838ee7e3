"""A rank's pulse: a listening TCP socket each rank holds, opened at start-up on the address it
reaches the rendezvous from, never accepted from and never read: the kernel of its host
completes a connection to it while the process lives, stopped or hung or not, and refuses one
once the process is gone, and a host that is down does not answer. probe() and probe_all() say
which; whereabouts.py names the silent ranks by it at a deadline, doctor/check.py the lost hosts.
Nothing of it runs inside a timed window, and it costs one file descriptor a rank."""

import errno
import os
import selectors
import socket
import time

PROBE_S = 1.0  # rank 0 waits this long for a silent rank's host to answer its pulse


def open_pulse(master_addr):
    """A listening socket on the address this host reaches master_addr from (None when it
    cannot be had: the probe then says nothing). Kept open until the process ends."""
    try:
        family = socket.AF_INET6 if ":" in master_addr else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as route:  # sends nothing
            route.connect((master_addr, 9))
            address = route.getsockname()[0]
        pulse = socket.socket(family, socket.SOCK_STREAM)
        pulse.bind((address, 0))
        pulse.listen(8)
        os.set_inheritable(pulse.fileno(), False)
        return pulse
    except OSError:
        return None


def probe(text, seconds=PROBE_S):
    """A rank's pulse ("address port"): "alive" (its kernel completed the connection), "gone"
    (refused: nothing listens there, the process ended), "silent" (no answer in `seconds`:
    the host or its network is down), or None (no pulse posted, or the probe failed)."""
    try:
        address, port = text.rsplit(" ", 1)
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as connection:
            connection.settimeout(seconds)
            connection.connect((address, int(port)))
        return "alive"
    except ConnectionRefusedError:
        return "gone"
    except TimeoutError:
        return "silent"
    except OSError as error:
        if error.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
            return "silent"
        return None
    except ValueError:
        return None


PROBE_BATCH = 256  # pulses tried at once (each a file descriptor until it answers)


def probe_all(texts, seconds=PROBE_S):
    """probe() of many pulses at once ({rank: "address port"} -> {rank: state}): every
    connection started together and all waited for under one deadline, so the answer comes
    within `seconds` of the start whatever the number of silent ranks (PROBE_BATCH at a time:
    ceil(n / PROBE_BATCH) deadlines at most)."""
    states, pending = {}, list(texts.items())
    while pending:
        batch, pending = pending[:PROBE_BATCH], pending[PROBE_BATCH:]
        with selectors.DefaultSelector() as selector:
            for rank, text in batch:
                states[rank] = _start(selector, rank, text)
            deadline = time.monotonic() + seconds
            while selector.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                for key, _ in selector.select(left):
                    connection, rank = key.fileobj, key.data
                    selector.unregister(connection)
                    code = connection.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                    states[rank] = _state(code)
                    connection.close()
            for key in list(selector.get_map().values()):  # no answer by the deadline
                states[key.data] = "silent"
                key.fileobj.close()
    return states


def _state(code):
    if code == 0:
        return "alive"
    if code == errno.ECONNREFUSED:
        return "gone"
    if code in (errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ETIMEDOUT):
        return "silent"
    return None


def _start(selector, rank, text):
    """A non-blocking connection to one pulse, registered with `selector` while it is under
    way; the state when it is already decided (None: no pulse, or a malformed one)."""
    if not text:
        return None
    try:
        address, port = text.rsplit(" ", 1)
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        connection = socket.socket(family, socket.SOCK_STREAM)
    except (ValueError, OSError):
        return None
    connection.setblocking(False)
    try:
        code = connection.connect_ex((address, int(port)))
    except (ValueError, OSError):
        connection.close()
        return None
    if code in (errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EAGAIN):
        selector.register(connection, selectors.EVENT_WRITE, rank)
        return "silent"  # until it answers
    connection.close()
    return _state(code)
