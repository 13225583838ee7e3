"""replay.py TRACE_DIR: replay a recorded job's communication (docs/replay.md).

    torchrun --nproc_per_node 2 replay.py trace/ --check --output replay.jsonl
    python replay.py trace/ --dry-run
"""

from commbench.trace.replay import main

if __name__ == "__main__":
    main()
