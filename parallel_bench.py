"""Train a small decoder-only transformer with each parallel strategy (DDP, ZeRO-1/2/3, tensor
and pipeline parallelism) and measure its step time, memory and the communication of a step.

    torchrun --nproc_per_node 2 parallel_bench.py --strategy all --output strategies.jsonl

Launched like the op scripts (torchrun, deepspeed, mpirun, srun). See commbench/strategies/.
"""

from commbench.strategies.bench import main

if __name__ == "__main__":
    main()
