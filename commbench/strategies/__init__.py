"""Measured parallel strategies (parallel_bench.py): a small decoder-only transformer trained
with DDP, ZeRO-1/2/3, tensor and pipeline parallelism, and what each step communicates.

model.py: the model, its shards and stages, the synthetic data; accounting.py: the
communication of each step; train.py: the strategies; bench.py: flags, loop, table, records.
"""
