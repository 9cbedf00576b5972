"""hora.torch: the Horovod API for PyTorch (CPU tensors) over Hora.

    import hora.torch as hvd
    hvd.init()
    x = hvd.allreduce(torch.ones(3))              # averaged over all ranks
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)

Environment: HORA_CYCLE_TIME (ms between engine rounds, default 1), HORA_FUSION_THRESHOLD
(bytes of a fusion buffer, default 64 MiB, 0 disables fusion), HORA_CACHE_CAPACITY (operations
the response cache remembers, default 1024, 0 disables it), HORA_TIMELINE (a Chrome-trace
file written by rank 0), HORA_TIMELINE_MARK_CYCLES, HORA_STALL_CHECK_TIME_SECONDS (warn about
operations some ranks have not submitted after this long, default 60, 0 disables),
HORA_STALL_SHUTDOWN_TIME_SECONDS (cancel such an operation on every rank, with ValueError, after
this long; default HORA_TIMEOUT_MS/1000, 0 disables), and the library's own (HORA_TIMEOUT_MS,
...).
"""
from hora.torch.compression import Compression  # noqa: F401
from hora.torch.mpi_ops import (  # noqa: F401
    Adasum, Average, HorovodInternalError, HostsUpdatedInterrupt, Max, Min, Product,
    ProcessSet, Sum, add_process_set, allgather, allgather_async, allreduce, allreduce_,
    allreduce_async, allreduce_async_, alltoall, alltoall_async, barrier, broadcast, broadcast_,
    broadcast_async, broadcast_async_, ccl_built, cross_rank, cross_size, cuda_built, ddl_built,
    global_process_set, gloo_built, gloo_enabled, grouped_allgather, grouped_allgather_async,
    grouped_allreduce, grouped_allreduce_, grouped_allreduce_async, grouped_allreduce_async_,
    grouped_reducescatter, grouped_reducescatter_async, init, is_homogeneous, is_initialized,
    join, local_rank, local_size, mpi_built, mpi_enabled, mpi_threads_supported, nccl_built,
    poll, rank, reducescatter, reducescatter_async, remove_process_set, rocm_built, shutdown,
    size, sparse_allreduce_async, start_timeline, stop_timeline, synchronize,
)
from hora.torch.optimizer import DistributedOptimizer  # noqa: F401
from hora.torch.functions import (  # noqa: F401
    allgather_object, broadcast_object, broadcast_optimizer_state, broadcast_parameters,
)
from hora.torch.sync_batch_norm import SyncBatchNorm  # noqa: F401
