"""Defaults of the benchmark suite, and the registered ops (OPS).

Standard library only: `--dist torch` must start without DeepSpeed, and this module is
imported by everything. `constants.py` at the top of a checkout is the original's name for it.
What each op is (its bandwidth factors, root, reduction) is opfacts.py's table.
"""

from . import opfacts

DEFAULT_WARMUPS = 5
DEFAULT_TRIALS = 50
DEFAULT_MAX_WINDOWS = 100  # --precision: windows a size at most (the warm-up not counted)
DEFAULT_TYPE = "float"
DEFAULT_BACKEND = None  # detected: see commbench.ranks.layer.resolve_device_and_backend
DEFAULT_DEVICE = None  # detected
DEFAULT_UNIT = "Gbps"
DEFAULT_DIST = "deepspeed"
DEFAULT_MAXSIZE = 24
DEFAULT_MINSIZE = 1
DEFAULT_STEP_FACTOR = 2.0
DEFAULT_MIN_BYTES = 8  # --max-bytes or --step-factor alone sweeps from 8 bytes, as nccl-tests -b 8
DEFAULT_MAX_BYTES = 32 << 20  # --min-bytes alone sweeps up to nccl-tests' default -e 32M
DEFAULT_REDUCE_OP = "sum"
REDUCE_OPS = tuple(opfacts.REDUCE_OPS)  # --op's choices
DEFAULT_MEM_FACTOR = 0.3
TORCH_DISTRIBUTED_DEFAULT_PORT = 29500
DEFAULT_TIMEOUT = 300  # seconds a rank waits for its peers before giving up

BW_UNITS = ("Gbps", "GBps")
DISTS = ("deepspeed", "torch")
BACKENDS = ("nccl", "ccl", "mpi", "gloo", "xccl", "hccl")

# The registered ops: the order in which run_all.py runs them, and the flag that selects each
# (--all-reduce, ...). An op is one module commbench/ops/<op>.py plus its name here
# (docs/extending.md).
OPS = ("all_reduce", "all_gather", "all_to_all", "reduce_scatter", "pt2pt", "broadcast",
       "reduce", "gather", "scatter", "all_to_allv", "barrier")
# What run_all.py runs when no op is named: the original suite's six (--all: every one above).
DEFAULT_OPS = ("all_reduce", "all_gather", "all_to_all", "reduce_scatter", "pt2pt", "broadcast")

# --maxsize bounds: 2 gives one scan size (2 elements per row of the n x 2^p tensor);
# beyond 40 a single message would exceed any memory that exists.
MIN_MAXSIZE = 2
MAX_MAXSIZE = 40

# Memory headroom the original adds for all_gather when the one-tensor API is used
# (no list of n output tensors to keep alive).
ALL_GATHER_ONE_TENSOR_EXTRA_FACTOR = 0.2

# Single-size memory plan (commbench.bench.sizes.plan_single_size): the buffers an op allocates, the
# copies the backend stages them through, and these reserves must fit in this fraction of the
# memory the rank may plan on. The rest is left to the OS, the allocator and the process's own
# growth.
USABLE_MEMORY_FRACTION = 0.9
# The backend's fixed working buffers (gloo's ring chunks: ~4 MiB measured at 2 and 3 ranks).
BACKEND_MEMORY_RESERVE = 64 << 20
