"""scatter: rank 0 splits its tensor into n equal chunks and sends chunk r to rank r."""

from commbench.entry import cli
from commbench.ops.scatter import *  # noqa: F401,F403  (the descriptor, timed_scatter, run_scatter)
from commbench.ops.scatter import run_scatter

if __name__ == "__main__":
    cli(run_scatter)
