"""gcbench's compressors as PyTorch DDP communication hooks: take the compressor a suite
found fastest into your own training script with one line.

    import gcbench.hooks
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    ddp.register_comm_hook(*gcbench.hooks.hook("dgc-1pct", process_group))

What each hook does, and what it does not (it runs synchronously): see
`gcbench.cluster.ddp_hooks`, where they live beside the executor they run.
"""

from gcbench.cluster.ddp_hooks import HookState, hook, hooks

__all__ = ["HookState", "hook", "hooks"]
