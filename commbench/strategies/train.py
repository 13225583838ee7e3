"""The six strategies, each one optimizer step of the same model at a time.

A strategy is built once (`setup`), then `step()` runs one optimizer step (all micro-batches)
and returns the mean loss over its micro-batches on the rank that knows it (`loss_rank`),
None elsewhere. Every collective goes through torch.distributed's module-level functions,
looked up at call time, so that the accounting (trace/accounting.py) sees it.

- ddp: DistributedDataParallel with a comm hook (async all_reduce of each bucket, divided by
  n); gradient accumulation under no_sync() for the first m-1 micro-batches, so the gradients
  are all-reduced once per step: element_size x P bytes per rank per step.
- zero1, zero2, zero3: deepspeed.initialize with torch.optim.AdamW; stage 3 with small live
  and prefetch limits so that parameters are really re-gathered in backward.
- tp: Megatron-style, written here (model.TPGroup): 2 all_reduce forward and 2 backward per
  layer per micro-batch, each micro_batch x seq x hidden elements.
- pp: GPipe with blocking send/recv: every micro-batch forward, then every one backward.
"""

import contextlib
import logging
import sys
import warnings

import torch
import torch.distributed

from ..ranks import layer, shm
from ..ranks.layer import tell_deepspeed_backend
from .model import (TPGroup, build_model, count_params, shard_for_tp, stage_for_pp,
                    synthetic_batches)

LEARNING_RATE = 1e-3
WEIGHT_DECAY = 0.01
DDP_BUCKET_CAP_MB = 25


def optimizer_config():
    return {"name": "torch.optim.AdamW", "lr": LEARNING_RATE, "weight_decay": WEIGHT_DECAY}


def _adamw(parameters):
    return torch.optim.AdamW(parameters, lr=LEARNING_RATE, weight_decay=WEIGHT_DECAY)


class Strategy:
    name = None
    loss_rank = 0

    def __init__(self, run):
        self.run = run  # bench.Run: args, comm, model config, dtype
        self.comm, self.args, self.config = run.comm, run.args, run.model_config
        self.n, self.rank = run.comm.world_size, run.comm.rank
        self.dp, self.tp, self.pp = self.n, 1, 1
        self.params_per_rank = run.model_config.params

    def setup(self):
        raise NotImplementedError

    def step(self):
        raise NotImplementedError

    def settings(self):
        return {}

    def close(self):
        pass

    def _batches(self, dp_rank):
        return synthetic_batches(self.config, self.args.micro_batch, self.args.micro_batches,
                                 self.args.seed, dp_rank, self.comm.device)

    @property
    def samples_per_step(self):
        return self.args.micro_batch * self.args.micro_batches * self.dp


# --------------------------------------------------------------------------------------- DDP

def _all_reduce_hook(world_size, bucket):
    """DDP comm hook: the bucket all-reduced through torch.distributed.all_reduce (async, so
    the accounting times it issue to completion) and averaged."""
    work = torch.distributed.all_reduce(bucket.buffer(), async_op=True)
    return work.get_future().then(lambda future: future.value()[0].div_(world_size))


class DDP(Strategy):
    name = "ddp"

    def setup(self):
        from torch.nn.parallel import DistributedDataParallel
        model = build_model(self.config, self.args.seed, self.run.dtype).to(self.comm.device)
        device_ids = [self.comm.device.index] if self.comm.on_accelerator else None
        self.model = DistributedDataParallel(model, device_ids=device_ids,
                                             bucket_cap_mb=DDP_BUCKET_CAP_MB,
                                             gradient_as_bucket_view=True)
        self.model.register_comm_hook(self.n, _all_reduce_hook)
        self.optimizer = _adamw(self.model.parameters())
        self.batches = self._batches(self.rank)
        self.communicate = True

    def step(self):
        """m micro-batches, the first m-1 under no_sync(); with communicate False (the no_sync
        steps exposed communication is measured against) all of them."""
        total = 0.0
        last = len(self.batches) - 1
        for index, (inputs, targets) in enumerate(self.batches):
            sync = self.communicate and index == last
            with contextlib.nullcontext() if sync else self.model.no_sync():
                loss = self.model(inputs, targets)
                (loss / len(self.batches)).backward()
            total += loss.detach()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=False)
        return (total / len(self.batches)).item()

    def settings(self):
        return {"bucket_cap_mb": DDP_BUCKET_CAP_MB, "gradient_as_bucket_view": True,
                "comm_hook": "torch.distributed.all_reduce(bucket, async_op=True), then / n",
                "accumulation": "no_sync() on the first micro_batches-1 micro-batches: one "
                                "all_reduce of every gradient per step"}

    def close(self):
        del self.model, self.optimizer


# -------------------------------------------------------------------------------------- ZeRO

def import_deepspeed(device_type):
    """deepspeed, its logger quiet (the table owns stdout)."""
    deepspeed, _, _ = layer.import_deepspeed(device_type, "--strategy zero1/zero2/zero3",
                                                  instead=None)
    from deepspeed.utils import logger
    logger.setLevel(logging.WARNING)
    # DeepSpeed 0.19 calls torch's deprecated *_into_tensor / *_tensor collectives itself.
    warnings.filterwarnings("ignore", message=r"`torch\.distributed\.\w+` is deprecated",
                            category=FutureWarning)
    return deepspeed


class Zero(Strategy):
    stage = None

    def deepspeed_config(self):
        if self.run.ds_variant is not None:  # --ds-config: the user's, as bench.for_engine made it
            return self.run.ds_variant
        args = self.args
        zero = {"stage": self.stage, "contiguous_gradients": True}
        if self.stage < 3:
            zero.update(reduce_bucket_size=500_000_000, allgather_bucket_size=500_000_000,
                        overlap_comm=False)
        else:
            live = int(args.stage3_live)
            # Without small limits DeepSpeed keeps a small model's parameters gathered after the
            # forward and never re-gathers them in backward: no ZeRO-3 traffic to measure.
            zero.update(stage3_max_live_parameters=live, stage3_max_reuse_distance=live,
                        stage3_prefetch_bucket_size=live, stage3_param_persistence_threshold=0,
                        reduce_bucket_size=500_000_000, overlap_comm=False)
        return {
            "train_micro_batch_size_per_gpu": args.micro_batch,
            "gradient_accumulation_steps": args.micro_batches,
            "train_batch_size": args.micro_batch * args.micro_batches * self.n,
            "zero_optimization": zero,
            "bf16": {"enabled": args.dtype == "bfloat16"},
            "gradient_clipping": 0.0,
            "steps_per_print": 1 << 30,
            "wall_clock_breakdown": False,
        }

    def setup(self):
        deepspeed = import_deepspeed(self.comm.device.type)
        tell_deepspeed_backend(deepspeed.get_accelerator(), self.comm.backend)
        # The model in float32: with bf16 enabled DeepSpeed casts it and keeps float32 masters.
        model = build_model(self.config, self.args.seed, torch.float32).to(self.comm.device)
        self.ds_config = self.deepspeed_config()
        with contextlib.redirect_stdout(sys.stderr):
            self.engine, _, _, _ = deepspeed.initialize(model=model, optimizer=_adamw(
                model.parameters()), config=self.ds_config)
        self.read_back = None
        if self.run.user is not None:
            from .dsconfig import read_back
            self.read_back = read_back(self.engine, self.ds_config)
        # initialize() broadcast the parameters: every rank has mapped DeepSpeed's CPU buffers.
        shm.unlink_deepspeed_buffer(self.comm.rank)
        self.batches = self._batches(self.rank)

    def step(self):
        total = 0.0
        for inputs, targets in self.batches:
            loss = self.engine(inputs, targets)
            self.engine.backward(loss)
            self.engine.step()  # the optimizer steps at the last micro-batch only
            total += loss.detach().float()
        return (total / len(self.batches)).item()

    def settings(self):
        settings = {"deepspeed": self.ds_config,
                    "deepspeed_version": sys.modules["deepspeed"].__version__}
        if self.read_back is not None:
            # the engine's own view of the keys the config sets (deepspeed_config's names)
            settings["engine_read_back"] = self.read_back
        return settings

    def close(self):
        with contextlib.suppress(Exception):
            self.engine.destroy()
        del self.engine


class Zero1(Zero):
    name, stage = "zero1", 1


class Zero2(Zero):
    name, stage = "zero2", 2


class Zero3(Zero):
    name, stage = "zero3", 3


# ------------------------------------------------------------------------ tensor parallelism

class TP(Strategy):
    name = "tp"

    def __init__(self, run):
        super().__init__(run)
        self.dp, self.tp = 1, self.n
        self.params_per_rank = self.config.tp_params(self.n)

    def setup(self):
        full = build_model(self.config, self.args.seed, self.run.dtype)
        self.model = shard_for_tp(full, TPGroup(self.n, self.rank)).to(self.comm.device)
        del full
        self.params_per_rank = count_params(self.model)
        self.optimizer = _adamw(self.model.parameters())
        self.batches = self._batches(0)  # every rank the same batch

    def step(self):
        total = 0.0
        for inputs, targets in self.batches:
            loss = self.model(inputs, targets)
            (loss / len(self.batches)).backward()
            total += loss.detach()
        self.optimizer.step()
        self.optimizer.zero_grad()
        return (total / len(self.batches)).item()

    def settings(self):
        return {"tp": self.n, "heads_per_rank": self.config.heads // self.n,
                "column_parallel": ["qkv", "mlp up"], "row_parallel": ["attention out", "mlp down"],
                "replicated": ["embeddings", "positions", "layernorms", "head",
                               "row-parallel biases"],
                "all_reduce": "forward: after attention out and mlp down; backward: before qkv "
                              "and mlp up (torch.distributed.all_reduce, synchronous)"}

    def close(self):
        del self.model, self.optimizer


# ---------------------------------------------------------------------- pipeline parallelism

class PP(Strategy):
    name = "pp"

    def __init__(self, run):
        super().__init__(run)
        self.dp, self.pp = 1, self.n
        self.loss_rank = self.n - 1
        self.params_per_rank = self.config.pp_params(self.n, self.rank)

    def setup(self):
        full = build_model(self.config, self.args.seed, self.run.dtype)
        self.model = stage_for_pp(full, self.n, self.rank).to(self.comm.device)
        self.params_per_rank = count_params(self.model)
        self.optimizer = _adamw(self.model.parameters())
        self.batches = self._batches(0)
        self.first, self.last = self.rank == 0, self.rank == self.n - 1
        self.shape = (self.args.micro_batch, self.config.seq, self.config.hidden)

    def _receive(self, source):
        buffer = torch.empty(self.shape, dtype=self.run.dtype, device=self.comm.device)
        torch.distributed.recv(buffer, source)
        return buffer

    def step(self):
        """GPipe: all forwards (activations to the next stage), then all backwards in reverse
        order (their gradients to the previous one)."""
        m = len(self.batches)
        inputs, outputs, total = [], [], 0.0
        for micro_inputs, targets in self.batches:
            if self.first:
                received, x = None, micro_inputs
            else:
                received = x = self._receive(self.rank - 1).requires_grad_()
            out = self.model(x, targets if self.last else None)
            if self.last:
                total += out.detach()
                out = out / m
            else:
                torch.distributed.send(out.detach().contiguous(), self.rank + 1)
            inputs.append(received)
            outputs.append(out)
        for index in reversed(range(m)):
            if self.last:
                outputs[index].backward()
            else:
                outputs[index].backward(self._receive(self.rank + 1))
            if not self.first:
                torch.distributed.send(inputs[index].grad.contiguous(), self.rank - 1)
            inputs[index] = outputs[index] = None
        self.optimizer.step()
        self.optimizer.zero_grad()
        return (total / m).item() if self.last else None

    def settings(self):
        ranges = self.config.pp_layers(self.n)
        return {"schedule": "GPipe: all micro-batches forward, then all backward (reverse order)",
                "stages": self.n, "stage_layers": [list(r) for r in ranges],
                "first_stage": "token and position embeddings",
                "last_stage": "final layernorm, head and loss",
                "transfer": "torch.distributed.send / recv (blocking) of micro_batch x seq x "
                            "hidden activations forward and their gradients backward"}

    def close(self):
        del self.model, self.optimizer


STRATEGIES = {cls.name: cls for cls in (DDP, Zero1, Zero2, Zero3, TP, PP)}
ORDER = tuple(STRATEGIES)
