"""A hora.torch rank under torchrun (tests/launch/test_torchrun.sh): init() with nothing but
torchrun's environment, an allreduce of rank + 1, the sum checked against the size."""
import torch
import hora.torch as hvd

hvd.init()
t = torch.full((4,), float(hvd.rank() + 1))
s = hvd.allreduce(t, op=hvd.Sum)
want = hvd.size() * (hvd.size() + 1) / 2
assert torch.all(s == want), (s, want)
print("rank %d of %d: sum %g ok" % (hvd.rank(), hvd.size(), want), flush=True)
hvd.shutdown()
