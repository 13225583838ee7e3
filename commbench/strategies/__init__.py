"""Measured parallel strategies (parallel_bench.py): a small decoder-only transformer trained
with DDP, ZeRO-1/2/3, tensor and pipeline parallelism, and what each step communicates.

model.py: the model, its shards and stages, the synthetic data; train.py: the strategies;
bench.py: flags, loop, table, records. What each step communicates is counted by
trace/accounting.py, the wrapping the recorder (trace/capture.py) also feeds on.
"""
