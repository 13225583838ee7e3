"""commbench: the harness behind the op scripts at the top of the repository.

One module per concern, dependencies running one way (top to bottom):

  harness     runs an op: its sizes, timing, check, row and record; the entry point
  sizes       which message sizes: the scan, the single-size plan, allocation
  precision   the passes over an op's sizes: --repeat's, --precision's (the budget shared out)
  timing      the warmup and trial loop, per-trial statistics, --repeat's interval
  overlap     --overlap: the collective against a compute phase, OSU's overlap %
  check       --check: known input, the expected result, wrong elements counted
  comm        device and backend, the communication layer (Comm), process-group set-up
  guard       what ends a run cleanly: deadlines, stop signals, peer failures
  launch      launcher environments, node lists, MASTER_ADDR and MASTER_PORT
  memory      how much memory a rank has, and how much one size took
  collective  the descriptor an op script fills in, bandwidth from it
  table       what rank 0 prints: the header, rows, units; notes on stderr
  cli         the command line and its validators
  numbers     validators of numeric flags (also report.py's)
  dtypes      which dtypes a run may use, and which a backend can move
  results     result files (.jsonl, .csv, .json) as they are written and read
  outputs     where rank 0's records go: the results file, the database, the Prometheus file
  db/         the results database (--db): schema and migrations, writing and reading, history
  prometheus  --prometheus: node_exporter's textfile format
  errors      the one exception type of expected failures
  report/     reading runs back: compare, plot, strategy, buckets
  ops/        one module per op: its descriptor and the original's timed_<op>, run_<op>
  defaults    the defaults and the registered ops (OPS), standard library only
  commands    `python -m commbench COMMAND` and the `commbench` command

`utils.py` and `constants.py` at the top of a checkout are the public face with the original
suite's names; the package imports without them.
"""

import warnings

# The one place of the version: pyproject.toml reads it, `--version` prints it, every results
# file's meta carries it (versions.commbench).
__version__ = "0.1.0"

# torch warns at import when numpy is missing; `--dist torch` needs torch alone (numpy is not
# one of torch's own requirements), so the warning concerns nothing this suite does.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)
