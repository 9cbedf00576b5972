# A data-parallel training script written for horovod.torch, in its documented idiom. The test
# suite runs it with the import line below changed to `import hora.torch as hvd` and nothing
# else: it must train, keep every rank's parameters identical, and save a checkpoint.
import argparse
import hashlib

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data
import torch.utils.data.distributed

import horovod.torch as hvd

parser = argparse.ArgumentParser(description="Horovod-style synthetic classification")
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--fp16-allreduce", action="store_true", default=False)
parser.add_argument("--use-adasum", action="store_true", default=False)
parser.add_argument("--checkpoint", default=None)
args = parser.parse_args()

hvd.init()
torch.manual_seed(1234)
if torch.cuda.is_available():
    torch.cuda.set_device(hvd.local_rank())
    torch.cuda.manual_seed(1234)
torch.set_num_threads(1)

# Two Gaussian blobs per class in 16 dimensions: learnable in a few epochs.
gen = torch.Generator().manual_seed(7)
centers = torch.randn(4, 16, generator=gen) * 3
labels = torch.randint(0, 4, (2048,), generator=gen)
features = centers[labels] + torch.randn(2048, 16, generator=gen)
dataset = torch.utils.data.TensorDataset(features, labels)
train_sampler = torch.utils.data.distributed.DistributedSampler(
    dataset, num_replicas=hvd.size(), rank=hvd.rank())
train_loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, sampler=train_sampler)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.bn = nn.BatchNorm1d(32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        return F.log_softmax(self.fc2(F.relu(self.bn(self.fc1(x)))), dim=1)


model = Net()
lr_scaler = 1 if args.use_adasum else hvd.size()
optimizer = optim.SGD(model.parameters(), lr=args.lr * lr_scaler, momentum=0.9)

hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)
compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                     compression=compression,
                                     op=hvd.Adasum if args.use_adasum else hvd.Average)


def metric_average(val, name):
    tensor = torch.tensor(val)
    avg_tensor = hvd.allreduce(tensor, name=name)
    return avg_tensor.item()


losses = []
for epoch in range(args.epochs):
    model.train()
    train_sampler.set_epoch(epoch)
    total, batches = 0.0, 0
    for data, target in train_loader:
        optimizer.zero_grad()
        loss = F.nll_loss(model(data), target)
        loss.backward()
        optimizer.step()
        total += loss.item()
        batches += 1
    losses.append(metric_average(total / batches, "avg_loss"))
    if hvd.rank() == 0:
        print("epoch %d loss %.4f" % (epoch, losses[-1]), flush=True)

# Batch-norm statistics are not reduced by the optimizer: average them as Horovod users do.
for name, buf in model.named_buffers():
    if buf.is_floating_point():
        buf.copy_(hvd.allreduce(buf, name="buffer." + name))

digest = hashlib.sha256()
for v in model.state_dict().values():
    digest.update(v.contiguous().numpy().tobytes())
print("FINAL rank %d of %d first_loss %.6f last_loss %.6f params %s"
      % (hvd.rank(), hvd.size(), losses[0], losses[-1], digest.hexdigest()), flush=True)
if hvd.rank() == 0 and args.checkpoint:
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, args.checkpoint)
hvd.shutdown()
