"""A job that records its own communication with commbench.trace.record (two lines), for
tests/test_replay.py: every kind of call the recorder keeps (those between ranks from 2 ranks).

    torchrun --nproc_per_node N tests/data/traced_job.py TRACE_DIR
"""

import sys

import torch
import torch.distributed as dist

from commbench.trace import record

dist.init_process_group("gloo")
rank, n = dist.get_rank(), dist.get_world_size()
pair = dist.new_group([0, 1]) if n > 1 else None  # made on every rank; used by ranks 0 and 1
with record(sys.argv[1]) as recorder:
    for step in range(2):
        x = torch.ones(1000 + step)
        dist.all_reduce(x)
        work = dist.all_reduce(torch.ones(300), op=dist.ReduceOp.MAX, async_op=True)
        dist.broadcast(x, src=n - 1)
        shards = torch.empty(7 * n)
        dist.all_gather_into_tensor(shards, torch.ones(7))
        dist.reduce_scatter_tensor(torch.empty(5), torch.ones(5 * n))
        work.wait()
        # uneven all-to-all: rank r sends r + j + 1 rows of 3 to rank j
        send = [rank + j + 1 for j in range(n)]
        receive = [j + rank + 1 for j in range(n)]
        out = torch.empty(sum(receive), 3)
        dist.all_to_all_single(out, torch.ones(sum(send), 3), receive, send)
        dist.reduce(torch.ones(11), dst=min(1, n - 1))
        if pair is not None and rank < 2:
            dist.all_reduce(torch.ones(13, dtype=torch.bfloat16), group=pair)
        if n > 1:  # a ring of batched sends and receives, and a plain send
            ops = [dist.P2POp(dist.isend, torch.ones(17), (rank + 1) % n),
                   dist.P2POp(dist.irecv, torch.empty(17), (rank - 1) % n)]
            for request in dist.batch_isend_irecv(ops):
                request.wait()
            if rank == 0:
                dist.send(torch.ones(19, dtype=torch.int32), 1)
            elif rank == 1:
                dist.recv(torch.empty(19, dtype=torch.int32), 0)
        recorder.step()
dist.barrier()
dist.destroy_process_group()
