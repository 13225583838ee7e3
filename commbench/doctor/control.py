"""How the ranks of a check stay in step without a collective of the whole world: a collective
waits for every rank, so one dead host would stop the check, and a dead host is a finding, not
a hang. They meet at torch.distributed's rendezvous store instead (the TCPStore rank 0 holds
for the process group): each rank says it has finished a step, rank 0 waits for them until
--timeout, names the ranks that never came, and says to every rank which hosts are gone; the
figures go through the store too. Only rank 0's own loss ends the check early (its store goes
with it), with one line saying so."""

import json
import time
import uuid

import torch.distributed

from ..errors import BenchmarkError

POLL_S = 0.05


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
        self.gone = set()  # ranks that missed a step: their hosts are unreachable

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

    def wait_for(self, keys, timeout=None):
        """Until every key is posted, or the timeout; returns the keys still missing."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        missing = list(keys)
        while missing:
            missing = [key for key in missing if not self.present([key])]
            if missing and time.monotonic() >= deadline:
                break
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
            while waiting and time.monotonic() < deadline:
                waiting = [r for r in waiting if not self.present([f"arrived/{name}/{r}"])]
                if waiting:
                    time.sleep(POLL_S)
            self.post(f"go/{name}", sorted(waiting))
            new = set(waiting)
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
