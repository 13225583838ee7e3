"""TEST STAND-IN for Intel's oneccl_bindings_for_pytorch, which no registry reachable here serves.

It registers a backend named "ccl" that is plain gloo underneath, the way the real package
registers its ProcessGroupCCL on import. It proves commbench's plumbing (detection, import
on demand, `--backend ccl`, every op through the "ccl" process group); it measures nothing
of oneCCL itself.
"""

import os

import torch.distributed as dist


def _create_gloo_as_ccl(store, rank, world_size, timeout):
    marker = os.environ.get("FAKE_CCL_MARKER_DIR")
    if marker:  # lets the test see that this backend, not plain gloo, made the process group
        open(os.path.join(marker, f"rank{rank}"), "w").close()
    return dist.ProcessGroupGloo(store, rank, world_size, timeout)


if "ccl" not in dist.Backend.backend_list:
    dist.Backend.register_backend("ccl", _create_gloo_as_ccl, devices=["cpu"])
