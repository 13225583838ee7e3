"""Check a cluster before (or while) it trains: which host, which link is slow or broken.

    srun -N 4 --ntasks-per-node=1 python doctor.py --dist torch --output doctor.jsonl
    torchrun --nnodes 4 --nproc-per-node 2 ... doctor.py --dist torch

Within each host its ranks together (every host at once), then every pair of hosts in rounds
of disjoint pairs (latency, each way, both ways), then a verdict against each figure's peers,
with suspects re-measured against good hosts before they are named. Exit status 0 healthy,
1 anything suspect or unreachable, 2 bad usage (docs/doctor.md).
"""

import sys

from commbench.bench import harness  # noqa: F401  (first: the package silences torch's warning without numpy)
from commbench.doctor.run import command as main

if __name__ == "__main__":
    sys.exit(main())
