"""A measurement that a dead peer cannot hold: the blocking part of a pair's, a host's or a
group's measurement (making its process group too) runs in a thread of its own while the rank's
main thread watches the peers' heartbeats in the store; once a peer's heartbeat stands still
(control.DEAD_S) or rank 0 has said it is gone, the rank is released: the measurement fails for
it with one line (PeerLost, a RuntimeError as the backend's own failures are) and the check goes
on, instead of waiting in a collective that can never finish until --timeout and being named
unreachable itself.

Why a thread: gloo in torch 2.13 cannot be interrupted. Its group's abort() and shutdown() leave
a pending recv blocked (measured: released only when the peer's socket closed, 8 s later), a
work's wait(timeout) closes the pair on expiry, and is_completed() of a send or recv stays False
until wait() returns. A process group's making waits for its peers' addresses in the store with
no way out but its timeout. The abandoned thread stays blocked on a group no one uses again; the
check ends its process with os._exit (run.py), as it does whenever a peer was lost."""

import threading

import torch

WATCH_S = 0.25  # the main thread looks at the peers' heartbeats this often


class PeerLost(RuntimeError):
    """A peer of the measurement stopped answering: this rank was released from it. `left`: a
    thread was left blocked in the work, holding what it held (a group's making: the process
    group's store client, check.fresh_group_store)."""
    left = False


def measured(control, peers, work):
    """work() run while every rank of `peers` (global ranks; this rank's own left out) still
    answers: its value, or its own exception, or PeerLost once one of them is known gone."""
    peers = [p for p in peers if p != control.rank]
    lost = control.lost(peers)
    if lost:
        raise PeerLost(_words(lost))
    box, done = {}, threading.Event()
    device = _device_index()

    def run():
        try:
            if device is not None:  # a thread starts on device 0: this rank's own, as the main
                torch.accelerator.set_device_index(device)  # thread's (its synchronize too)
            box["value"] = work()
        except BaseException as error:  # handed to the main thread, which raises it
            box["error"] = error
        finally:
            done.set()
    threading.Thread(target=run, daemon=True, name="commbench-doctor-measure").start()
    while not done.wait(WATCH_S):
        lost = control.lost(peers)
        if lost:
            control.released = True  # a thread left blocked: the process ends with os._exit
            error = PeerLost(_words(lost))
            error.left = True
            raise error
    if "error" in box:
        raise box["error"]
    return box.get("value")


def _words(lost):
    rank, why = lost[0]
    return f"released: rank {rank} stopped answering ({why}); this rank was not at fault"


def _device_index():
    """The main thread's accelerator device, or None (CPU ranks)."""
    try:
        return torch.accelerator.current_device_index() if torch.accelerator.is_available() \
            else None
    except (AttributeError, RuntimeError):
        return None
