"""Reports from runs of the suite: `runs` reads them back (results files, saved tables,
nccl-tests output), `compare` sets two side by side, `plot` draws their curves, `strategy`
prices parallel strategies with them. `report.py` at the top is their command line."""
