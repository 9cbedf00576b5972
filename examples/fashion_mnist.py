"""Fashion-MNIST from gzipped IDX files, offline.

Debian's dataset-fashion-mnist package installs train-images-idx3-ubyte.gz,
train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz in
/usr/share/datasets/fashion-mnist/. An IDX file is a big-endian header (two zero bytes, a type
code, the number of dimensions, then one 32-bit size per dimension) followed by the array.
"""
import gzip
import os

import numpy as np

DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"
CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
           "Ankle boot")
# Per-pixel mean and standard deviation of the training images (scaled to [0, 1]).
MEAN, STD = 0.2860, 0.3530

_IDX_TYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path):
    """The array in an IDX file (gzipped when the name ends in .gz)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _IDX_TYPES:
        raise ValueError("%s is not an IDX file" % path)
    ndim = data[3]
    header = 4 + 4 * ndim
    shape = tuple(int(d) for d in np.frombuffer(data, ">u4", count=ndim, offset=4))
    dtype = np.dtype(_IDX_TYPES[data[2]])
    count = int(np.prod(shape)) if shape else 1
    if len(data) != header + count * dtype.itemsize:
        raise ValueError("%s: %d bytes of data for shape %s" % (path, len(data) - header, shape))
    return np.frombuffer(data, dtype, count=count, offset=header).reshape(shape)


def load(data_dir=DEFAULT_DIR, train=True):
    """(images uint8 [N, 28, 28], labels uint8 [N]) of the training or the test set."""
    prefix = "train" if train else "t10k"
    images = read_idx(_find(data_dir, prefix + "-images-idx3-ubyte"))
    labels = read_idx(_find(data_dir, prefix + "-labels-idx1-ubyte"))
    if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
        raise ValueError("%s: images %s and labels %s do not match" % (data_dir, images.shape, labels.shape))
    return images, labels


def tensors(data_dir=DEFAULT_DIR, train=True):
    """(float32 images [N, 1, 28, 28] normalized, int64 labels [N]) as torch tensors."""
    import torch
    images, labels = load(data_dir, train)
    x = torch.from_numpy(images.astype(np.float32) / 255.0).sub_(MEAN).div_(STD).unsqueeze(1)
    y = torch.from_numpy(labels.astype(np.int64))
    return x, y


def _find(data_dir, stem):
    for name in (stem + ".gz", stem):
        path = os.path.join(data_dir, name)
        if os.path.exists(path):
            return path
    raise FileNotFoundError("%s(.gz) is not in %s (Debian's dataset-fashion-mnist package installs "
                            "it in %s)" % (stem, data_dir, DEFAULT_DIR))


def make_model():
    """The examples' classifier: two convolutions, dropout, two fully connected layers
    (1x28x28 -> 10x24x24 -> pool -> 20x8x8 -> pool -> 320 -> 50 -> 10 log-probabilities)."""
    import torch
    from torch import nn
    import torch.nn.functional as F

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
            self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
            self.conv2_drop = nn.Dropout2d()
            self.fc1 = nn.Linear(320, 50)
            self.fc2 = nn.Linear(50, 10)

        def forward(self, x):
            x = F.relu(F.max_pool2d(self.conv1(x), 2))
            x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
            x = F.relu(self.fc1(torch.flatten(x, 1)))
            x = F.dropout(x, training=self.training)
            return F.log_softmax(self.fc2(x), dim=1)

    return Net()


def batches(x, y, sampler, batch_size, limit=0):
    """(images, labels) batches in the order of a sampler's indices (this rank's shard), at most
    limit of them when limit > 0. Indexing whole batches keeps the input pipeline cheap."""
    import torch
    order = torch.tensor(list(iter(sampler)), dtype=torch.int64)
    for n, start in enumerate(range(0, len(order), batch_size)):
        if limit and n >= limit:
            break
        idx = order[start:start + batch_size]
        yield x[idx], y[idx]


def device(choice, local_rank):
    """The torch device of --device: cuda (this rank's local GPU, made current), cpu, or auto (the
    GPU where torch has CUDA and a GPU, else the CPU). Ranks beyond the GPUs share them in turn."""
    import torch
    if choice == "cpu" or (choice == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise SystemExit("--device cuda: this torch has no CUDA or this machine no GPU")
    index = local_rank % torch.cuda.device_count()
    torch.cuda.set_device(index)
    return torch.device("cuda", index)
