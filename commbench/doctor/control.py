"""How the ranks of a check stay in step without a collective of the whole world: a collective
waits for every rank, so one dead host would stop the check, and a dead host is a finding, not
a hang. They meet at torch.distributed's rendezvous store instead (the TCPStore rank 0 holds
for the process group): each rank says it has finished a step, rank 0 waits for them until
--timeout, names the ranks that never came, and says to every rank which hosts are gone; the
figures go through the store too. Only rank 0's own loss ends the check early (its store goes
with it), with one line saying so.

A rank that dies is named as soon as its death can be known, not at --timeout: every rank beats
a heartbeat in the store (a counter, every BEAT_S, from a thread of its own on a connection of
its own), and rank 0, waiting for a rank at a step, names it gone once its heartbeat has not
moved for DEAD_S by rank 0's clock (no clocks compared across hosts). A rank that hangs with its
process alive (its heartbeat beating) is still waited for until --timeout."""

import json
import threading
import time
import uuid

import torch.distributed

from ..errors import BenchmarkError

POLL_S = 0.05
BEAT_S = 0.5  # a rank's heartbeat: every this many seconds
DEAD_S = 10.0  # a heartbeat that has not moved for this long: its rank is gone


class Control:
    def __init__(self, comm, timeout):
        self.rank, self.world_size, self.timeout = comm.global_rank, comm.world_size, timeout
        try:
            default = torch.distributed.distributed_c10d._get_default_store()
        except (AttributeError, RuntimeError) as error:
            raise BenchmarkError(f"doctor.py needs torch.distributed's rendezvous store ({error}); "
                                 "start it with MASTER_ADDR and MASTER_PORT (env://)") from None
        # A run's own keys: its id comes from rank 0, through the process group, once.
        run = torch.tensor([uuid.uuid4().int % (1 << 62)], dtype=torch.int64, device=comm.device)
        torch.distributed.broadcast(run, 0)
        self.store = torch.distributed.PrefixStore(f"commbench-doctor-{int(run.item())}/", default)
        try:  # a client of its own: a group's making holds the process group's while it waits
            self.store = self.store.clone()  # for its peers (for a lost one: --timeout)
        except (AttributeError, RuntimeError):
            pass  # an older torch: the shared one
        self.gone = set()  # ranks that missed a step: their hosts are unreachable
        self.dead_why = {}  # rank -> how its loss was known ("heartbeat" or "timeout")
        self._beats = {}  # rank 0: rank -> (its last heartbeat seen, when it was first seen)
        self._watched = {}  # lost()'s, as _beats: a rank's peers in a measurement
        self.released = False  # a measurement was left blocked on a lost peer (release.py)
        self._stop = threading.Event()
        self._beater = None
        try:  # a connection of the heartbeat's own: a store client is not shared by threads
            beat_store = self.store.clone()
        except (AttributeError, RuntimeError):
            beat_store = None  # an older torch: --timeout alone
        try:  # the main thread's while a measurement's thread uses the process group's
            self._watch = self.store.clone()
        except (AttributeError, RuntimeError):
            self._watch = None
        if beat_store is not None:
            self._beater = threading.Thread(target=self._beat, args=(beat_store,),
                                            name="commbench-doctor-heartbeat", daemon=True)
            self._beater.start()

    def _beat(self, store):
        count = 0
        while not self._stop.is_set():
            count += 1
            try:
                store.set(f"beat/{self.rank}", str(count))
            except RuntimeError:
                return  # rank 0's store is gone: the main thread says so
            self._stop.wait(BEAT_S)

    def close(self):
        """Stop the heartbeat (at the end of the check)."""
        self._stop.set()
        if self._beater is not None:
            self._beater.join(timeout=2 * BEAT_S + 1)

    def dead(self, rank, now=None):
        """Rank 0: whether `rank`'s heartbeat has not moved for DEAD_S (the first look at it
        starts its clock; a rank that never beat is judged from then)."""
        now = time.monotonic() if now is None else now
        try:
            beat = self.store.get(f"beat/{rank}") if self.present([f"beat/{rank}"]) else None
        except RuntimeError as error:
            raise self._lost(error) from None
        last = self._beats.get(rank)
        if last is None or last[0] != beat:
            self._beats[rank] = (beat, now)
            return False
        return now - last[1] >= DEAD_S

    def lost(self, peers):
        """[(rank, why)] of `peers` known gone: said gone by rank 0 at a step, or their heartbeat
        still for DEAD_S by this rank's clock (the first look starts it). Any rank may ask; its
        own connection to the store (release.py's main thread, beside a measurement's)."""
        found = [(r, "rank 0 named it unreachable") for r in peers if r in self.gone]
        if found or self._watch is None:
            return found
        now = time.monotonic()
        for rank in peers:
            try:
                beat = self._watch.get(f"beat/{rank}") \
                    if self._watch.check([f"beat/{rank}"]) else None
            except RuntimeError as error:
                raise self._lost(error) from None
            last = self._watched.get(rank)
            if last is None or last[0] != beat:
                self._watched[rank] = (beat, now)
            elif now - last[1] >= DEAD_S:
                found.append((rank, f"its heartbeat in the store stood still for {DEAD_S:g} s"))
        return found

    def _lost(self, error):
        return BenchmarkError(f"rank {self.rank}: lost rank 0's host (its rendezvous store: "
                              f"{str(error).splitlines()[0][:200] if str(error) else error}); the "
                              "check cannot go on without it", rank_local=True)

    def post(self, key, value):
        try:
            self.store.set(key, json.dumps(value))
        except RuntimeError as error:
            raise self._lost(error) from None

    def fetch(self, key, timeout=None):
        """The value posted under `key`, or None when it did not come within the timeout (0:
        only if it is there now). Polled: the store's own wait logs a warning on timeout."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while not self.present([key]):
            if time.monotonic() >= deadline:
                return None
            time.sleep(POLL_S)
        try:
            return json.loads(self.store.get(key))
        except RuntimeError as error:
            raise self._lost(error) from None

    def present(self, keys):
        try:
            return self.store.check(keys)
        except RuntimeError as error:
            raise self._lost(error) from None

    def wait_for(self, keys, timeout=None, ranks=None):
        """Until every key is posted, or the timeout; returns the keys still missing. `ranks`
        (rank 0): each key's rank, whose key is given up on once its heartbeat stops."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        missing, looked = list(keys), time.monotonic()
        while missing:
            missing = [key for key in missing if not self.present([key])]
            if missing and time.monotonic() >= deadline:
                break
            if missing and ranks and time.monotonic() - looked >= BEAT_S:
                looked = time.monotonic()
                missing = [key for key in missing if not self.dead(ranks[key], looked)]
            if missing:
                time.sleep(POLL_S)
        return missing

    def step(self, name):
        """Every live rank arrives at step `name`; rank 0 waits for them until --timeout and
        tells everyone which ranks never came (added to self.gone). Returns the new ones."""
        self.post(f"arrived/{name}/{self.rank}", 1)
        if self.rank == 0:
            waiting = [r for r in range(self.world_size) if r not in self.gone]
            deadline = time.monotonic() + self.timeout
            dead, looked = [], time.monotonic()
            while waiting and time.monotonic() < deadline:
                waiting = [r for r in waiting if not self.present([f"arrived/{name}/{r}"])]
                if waiting and time.monotonic() - looked >= BEAT_S:
                    looked = time.monotonic()
                    now_dead = [r for r in waiting if self.dead(r, looked)]
                    for r in now_dead:
                        self.dead_why.setdefault(r, "heartbeat")
                    dead += now_dead
                    waiting = [r for r in waiting if r not in now_dead]
                if waiting:
                    time.sleep(POLL_S)
            for r in waiting:
                self.dead_why.setdefault(r, "timeout")
            self.post(f"go/{name}", sorted(waiting + dead))
            new = set(waiting + dead)
        else:
            # rank 0 may itself wait --timeout for a lost rank before it answers
            found = self.fetch(f"go/{name}", timeout=2 * self.timeout + 30)
            if found is None:
                raise BenchmarkError(f"rank {self.rank}: rank 0 did not answer within "
                                     f"{2 * self.timeout + 30:g} s; the check cannot go on",
                                     rank_local=True)
            new = set(found)
        new -= self.gone
        self.gone |= new
        return new
