#!/usr/bin/python3
"""Data-parallel training of a small CNN on Fashion-MNIST with the Horovod API of hora.torch.

    hora-run -n 4 /usr/bin/python3 examples/train_mnist.py [--epochs 2] [--batch-size 64] [--save m.pt]

Each rank trains on its own shard of the training set (DistributedSampler); gradients are averaged
by hvd.DistributedOptimizer; the learning rate is scaled by the number of ranks; the test metrics
are averaged over the ranks with hvd.allreduce. A Horovod program runs unchanged apart from the
import line.
"""
import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data.distributed import DistributedSampler

import hora.torch as hvd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fashion_mnist  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description="Fashion-MNIST with hora.torch (Horovod API)")
    p.add_argument("--batch-size", type=int, default=64, help="training batch size per rank")
    p.add_argument("--test-batch-size", type=int, default=1000, help="test batch size per rank")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--lr", type=float, default=0.01, help="learning rate of one rank (scaled by the size)")
    p.add_argument("--momentum", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--log-interval", type=int, default=200, help="batches between progress lines")
    p.add_argument("--limit-batches", type=int, default=0,
                   help="train and test on at most this many batches per epoch (0: all)")
    p.add_argument("--fp16-allreduce", action="store_true", help="compress gradients to float16")
    p.add_argument("--gradient-predivide-factor", type=float, default=1.0,
                   help="divide gradients by this before the sum and by size/factor after it")
    p.add_argument("--data-dir", default=fashion_mnist.DEFAULT_DIR)
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="where the model and batches live (auto: this rank's local GPU if there is one)")
    p.add_argument("--save", metavar="PATH", help="rank 0 saves the trained model's state_dict here")
    return p.parse_args()


def metric_average(value, name, device):
    return hvd.allreduce(torch.tensor(value, device=device), name=name).item()


def train(epoch, args, model, optimizer, train_x, train_y, sampler):
    model.train()
    sampler.set_epoch(epoch)
    seen = 0
    for batch_idx, (data, target) in enumerate(fashion_mnist.batches(train_x, train_y, sampler,
                                                                      args.batch_size, args.limit_batches)):
        data, target = data.to(args.dev), target.to(args.dev)
        optimizer.zero_grad()
        loss = F.nll_loss(model(data), target)
        loss.backward()
        optimizer.step()
        seen += len(data)
        if hvd.rank() == 0 and args.log_interval and batch_idx % args.log_interval == 0:
            print("train epoch %d [%d/%d (%.0f%%)] loss %.4f"
                  % (epoch, seen, len(sampler), 100.0 * seen / len(sampler), loss.item()), flush=True)


def test(args, model, test_x, test_y, sampler):
    model.eval()
    loss_sum, correct, count = 0.0, 0, 0
    with torch.no_grad():
        for data, target in fashion_mnist.batches(test_x, test_y, sampler, args.test_batch_size,
                                                  args.limit_batches):
            data, target = data.to(args.dev), target.to(args.dev)
            output = model(data)
            loss_sum += F.nll_loss(output, target, reduction="sum").item()
            correct += (output.argmax(dim=1) == target).sum().item()
            count += len(data)
    # averages over this rank's shard, then over the ranks
    test_loss = metric_average(loss_sum / max(count, 1), "avg_loss", args.dev)
    test_accuracy = metric_average(correct / max(count, 1), "avg_accuracy", args.dev)
    return test_loss, test_accuracy


def main():
    args = parse_args()
    hvd.init()
    torch.manual_seed(args.seed)
    args.dev = fashion_mnist.device(args.device, hvd.local_rank())  # this rank's GPU, or the CPU
    torch.set_num_threads(1)  # ranks share the cores; hora-run binds each to its own when it can

    train_x, train_y = fashion_mnist.tensors(args.data_dir, train=True)
    test_x, test_y = fashion_mnist.tensors(args.data_dir, train=False)
    train_sampler = DistributedSampler(train_x, num_replicas=hvd.size(), rank=hvd.rank(), shuffle=True,
                                       seed=args.seed)
    test_sampler = DistributedSampler(test_x, num_replicas=hvd.size(), rank=hvd.rank(), shuffle=False)

    model = fashion_mnist.make_model().to(args.dev)
    # The global batch grows with the number of ranks; so does the learning rate.
    optimizer = optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=args.momentum)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression, op=hvd.Average,
                                         gradient_predivide_factor=args.gradient_predivide_factor)

    if hvd.rank() == 0:
        print("training on %d rank(s), batch %d per rank, lr %g, %d epoch(s)"
              % (hvd.size(), args.batch_size, args.lr * hvd.size(), args.epochs), flush=True)
    times = []
    accuracy = 0.0
    for epoch in range(1, args.epochs + 1):
        start = time.perf_counter()
        train(epoch, args, model, optimizer, train_x, train_y, train_sampler)
        times.append(time.perf_counter() - start)
        test_loss, accuracy = test(args, model, test_x, test_y, test_sampler)
        if hvd.rank() == 0:
            print("epoch %d: %.2f s, test loss %.4f, test accuracy %.2f%%"
                  % (epoch, times[-1], test_loss, 100.0 * accuracy), flush=True)
    if hvd.rank() == 0:
        print("RESULT ranks=%d epochs=%d mean_epoch_s=%.3f test_accuracy=%.4f"
              % (hvd.size(), args.epochs, sum(times) / len(times), accuracy), flush=True)
        if args.save:
            torch.save(model.state_dict(), args.save)
            print("saved the model to %s" % args.save, flush=True)


if __name__ == "__main__":
    main()
