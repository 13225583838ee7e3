"""A plain DeepSpeed script (none of the suite's code) with DeepSpeed's comms logger on, its
summary saved per rank by the two lines docs/replay.md shows, for tests/test_replay.py:

    torchrun --nproc_per_node 2 tests/data/ds_comms_job.py LOG_DIR [raw]

With `raw`, get_raw_data() is saved instead of log_summary(return_dict=True).
"""

import json
import os
import sys

import deepspeed
import deepspeed.comm as dist
import torch

# DeepSpeed 0.19 on CPU starts its accelerator's backend (ccl, where oneCCL's bindings import)
# whatever it is asked: told gloo, as the suite does (commbench/ranks/layer.py)
deepspeed.get_accelerator()._communication_backend_name = "gloo"
deepspeed.init_distributed(dist_backend="gloo")
# what "comms_logger": {"enabled": true, "prof_all": true} in a DeepSpeed config turns on
dist.configure(enabled=True, prof_all=True)
n = dist.get_world_size()
x = torch.ones(1000)
for _ in range(3):
    dist.all_reduce(x)
dist.all_reduce(torch.ones(4096))
dist.all_gather_into_tensor(torch.empty(256 * n), torch.ones(256))
dist.all_gather_into_tensor(torch.empty(256 * n), torch.ones(256))
dist.reduce_scatter_tensor(torch.empty(512), torch.ones(512 * n))
dist.broadcast(x, src=0)
dist.barrier()
if sys.argv[2:] == ["raw"]:
    summary = dist.comms_logger.get_raw_data()
else:
    summary = dist.log_summary(return_dict=True)
os.makedirs(sys.argv[1], exist_ok=True)
json.dump(summary, open(f"{sys.argv[1]}/rank{dist.get_rank()}.json", "w"))
