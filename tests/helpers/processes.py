"""What every test process does around the libraries it loads: the pytest processes (conftest) and the launched
multi-process workers alike."""

import gc
import os
import sys


def freeze_loaded_objects() -> None:
    """Every Trainer.train() starts with accelerate's free_memory(), a full gc.collect(): over the imported libraries'
    half million objects it took 0.35 s a call, about a fifth of a short trainer test. The modules live as long as the
    process, so what is loaded now is moved out of the collector's view once; what the tests create later is still
    collected. Call it after the imports."""
    gc.collect()
    gc.freeze()


def exit_worker() -> None:
    """End a launched worker whose results are on disk. The process group is torn down before the interpreter does
    it: left to exit, a rank once aborted after training had finished ("terminate called without an active
    exception", exit code -6) while gloo's threads were destroyed. Under load a rank can still abort there (exit -6
    after its JSON is written), so the worker leaves without the interpreter's teardown. Every worker ends here, so
    the ranks meet at a barrier first."""
    import torch.distributed

    if torch.distributed.is_initialized():
        # A rank that finished first would otherwise close its sockets while the other may still be connecting
        # (gloo: "connectFullMesh failed ... Connection closed by peer"): a rank refused right after the group
        # formed leaves within milliseconds.
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
