"""A plain torch.distributed script (none of the suite's code) that writes PyTorch's execution
trace, one file per rank, for tests/test_replay.py:

    torchrun --nproc_per_node 2 tests/data/et_job.py TRACE_DIR
"""

import sys

import torch
import torch.distributed as dist
from torch.profiler import ExecutionTraceObserver

dist.init_process_group("gloo")
rank, n = dist.get_rank(), dist.get_world_size()
layer = torch.nn.Linear(64, 64)
observer = ExecutionTraceObserver().register_callback(f"{sys.argv[1]}/rank{rank}.json")
observer.start()
hidden = torch.relu(layer(torch.rand(16, 64)))  # the job's compute before its first call
x = torch.ones(1000)
dist.all_reduce(x)
dist.broadcast(x, src=0)
dist.all_gather_into_tensor(torch.empty(1000 * n), x)
work = dist.all_reduce(x, async_op=True)
work.wait()
dist.reduce_scatter_tensor(torch.empty(1000), torch.ones(1000 * n))
dist.all_to_all_single(torch.empty(8 * n), torch.ones(8 * n))
dist.all_to_all_single(torch.empty(3 * n), torch.ones(3 * n), [3] * n, [3] * n)
if rank == 0:
    dist.send(torch.ones(10, dtype=torch.bfloat16), 1)
elif rank == 1:
    dist.recv(torch.empty(10, dtype=torch.bfloat16), 0)
dist.barrier()
observer.stop()
observer.unregister_callback()
dist.destroy_process_group()
