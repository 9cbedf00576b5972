#!/usr/bin/python3
"""The model, data, sampler, seed, batch size and learning-rate scaling of train_mnist.py, trained
with torch.distributed and DistributedDataParallel on the backend of --backend (gloo or hora).

One process per rank, configured from the environment:
  rank and size  HORA_RANK / HORA_SIZE (set by hora-run), else RANK / WORLD_SIZE (torchrun)
  rendezvous     env:// when MASTER_ADDR and MASTER_PORT are set; under hora-run without them, a
                 file store in the temporary directory named after the launcher's HORA_ID

    MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 hora-run -n 4 /usr/bin/python3 examples/train_mnist_ddp.py --backend gloo
    hora-run -n 4 /usr/bin/python3 examples/train_mnist_ddp.py --backend hora
"""
import argparse
import gc
import hashlib
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data.distributed import DistributedSampler

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fashion_mnist  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description="Fashion-MNIST with torch.distributed DDP")
    p.add_argument("--backend", choices=("gloo", "hora"), default="gloo")
    p.add_argument("--batch-size", type=int, default=64, help="training batch size per rank")
    p.add_argument("--test-batch-size", type=int, default=1000, help="test batch size per rank")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--lr", type=float, default=0.01, help="learning rate of one rank (scaled by the size)")
    p.add_argument("--momentum", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--log-interval", type=int, default=200, help="batches between progress lines")
    p.add_argument("--limit-batches", type=int, default=0,
                   help="train and test on at most this many batches per epoch (0: all)")
    p.add_argument("--data-dir", default=fashion_mnist.DEFAULT_DIR)
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="where the model and batches live (auto: this rank's local GPU if there is one)")
    p.add_argument("--save", metavar="PATH", help="rank 0 saves the trained model's state_dict here")
    return p.parse_args()


def rank_and_size():
    env = os.environ
    if "HORA_RANK" in env and "HORA_SIZE" in env:
        return int(env["HORA_RANK"]), int(env["HORA_SIZE"])
    if "RANK" in env and "WORLD_SIZE" in env:
        return int(env["RANK"]), int(env["WORLD_SIZE"])
    return 0, 1


def init_method(size):
    if os.environ.get("MASTER_ADDR") and os.environ.get("MASTER_PORT"):
        return "env://"
    launch_id = os.environ.get("HORA_ID")
    if size == 1 or launch_id:
        tag = hashlib.sha256((launch_id or str(os.getpid())).encode()).hexdigest()[:16]
        path = os.path.join(tempfile.gettempdir(), "train_mnist_ddp-%s.store" % tag)
        return "file://" + path
    sys.exit("set MASTER_ADDR and MASTER_PORT (or launch with hora-run)")


def train(epoch, args, model, optimizer, train_x, train_y, sampler, rank):
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
        if rank == 0 and args.log_interval and batch_idx % args.log_interval == 0:
            print("train epoch %d [%d/%d (%.0f%%)] loss %.4f"
                  % (epoch, seen, len(sampler), 100.0 * seen / len(sampler), loss.item()), flush=True)


def test(args, model, test_x, test_y, sampler, size):
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
    metrics = torch.tensor([loss_sum / max(count, 1), correct / max(count, 1)], dtype=torch.float64,
                           device=args.dev)
    dist.all_reduce(metrics)
    metrics /= size
    return metrics[0].item(), metrics[1].item()


def main():
    args = parse_args()
    if args.backend == "hora":
        import hora.torch.distributed  # noqa: F401  registers the backend
    rank, size = rank_and_size()
    method = init_method(size)
    dist.init_process_group(args.backend, init_method=method, rank=rank, world_size=size)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    local_rank = int(os.environ.get("HORA_LOCAL_RANK", os.environ.get("LOCAL_RANK", "0")))
    args.dev = fashion_mnist.device(args.device, local_rank)  # this rank's GPU, or the CPU

    train_x, train_y = fashion_mnist.tensors(args.data_dir, train=True)
    test_x, test_y = fashion_mnist.tensors(args.data_dir, train=False)
    train_sampler = DistributedSampler(train_x, num_replicas=size, rank=rank, shuffle=True, seed=args.seed)
    test_sampler = DistributedSampler(test_x, num_replicas=size, rank=rank, shuffle=False)

    model = fashion_mnist.make_model().to(args.dev)
    on_gpu = args.dev.type == "cuda"
    # broadcasts rank 0's parameters
    model = DistributedDataParallel(model, device_ids=[args.dev.index] if on_gpu else None)
    optimizer = optim.SGD(model.parameters(), lr=args.lr * size, momentum=args.momentum)

    if rank == 0:
        print("training on %d rank(s) with DDP on %s, batch %d per rank, lr %g, %d epoch(s)"
              % (size, args.backend, args.batch_size, args.lr * size, args.epochs), flush=True)
    times = []
    accuracy = 0.0
    for epoch in range(1, args.epochs + 1):
        start = time.perf_counter()
        train(epoch, args, model, optimizer, train_x, train_y, train_sampler, rank)
        times.append(time.perf_counter() - start)
        test_loss, accuracy = test(args, model, test_x, test_y, test_sampler, size)
        if rank == 0:
            print("epoch %d: %.2f s, test loss %.4f, test accuracy %.2f%%"
                  % (epoch, times[-1], test_loss, 100.0 * accuracy), flush=True)
    if rank == 0:
        print("RESULT ranks=%d epochs=%d mean_epoch_s=%.3f test_accuracy=%.4f"
              % (size, args.epochs, sum(times) / len(times), accuracy), flush=True)
        if args.save:
            torch.save(model.module.state_dict(), args.save)
            print("saved the model to %s" % args.save, flush=True)
    # Tear down in order, with no work in flight: the model (and DDP's reducer, which holds the
    # group) first, then the group. torch 1.13's gloo group joins its worker threads in its
    # destructor without releasing the GIL, which deadlocks if a worker is still freeing a tensor
    # when the last reference goes at an arbitrary point (pytorch/pytorch#56297).
    del model, optimizer
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()  # the file store's file goes with its last user


if __name__ == "__main__":
    main()
