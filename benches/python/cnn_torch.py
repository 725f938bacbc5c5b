"""PyTorch reference for `cargo bench-harp cnn`: the same network, data, batch, optimizer
and threads as harp's CNN (apps/src/cnn), trained on the CPU; prints one JSON line with
every epoch's training seconds and the final held-out accuracy.

Usage: cnn_torch.py IMAGES_GZ LABELS_GZ --epochs N --batch B --lr LR --threads T
       --channels C1,C2 --hidden H1,H2 --test-rows R --seed S
"""
import argparse
import gzip
import json
import struct
import time

import numpy as np
import torch
from torch import nn


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndims = data[3]
    dims = struct.unpack(">" + "I" * ndims, data[4 : 4 + 4 * ndims])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndims).reshape(dims)


def network(c1, c2, h1, h2):
    return nn.Sequential(
        nn.Conv2d(1, c1, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(c1, c2, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(c2 * 7 * 7, h1),
        nn.ReLU(),
        nn.Linear(h1, h2),
        nn.ReLU(),
        nn.Linear(h2, 10),
    )


def main():
    p = argparse.ArgumentParser()
    p.add_argument("images")
    p.add_argument("labels")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--channels", default="32,64")
    p.add_argument("--hidden", default="256,128")
    p.add_argument("--test-rows", type=int, default=2000)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    images = torch.from_numpy(read_idx(a.images).astype(np.float32) / 255.0).unsqueeze(1)
    labels = torch.from_numpy(read_idx(a.labels).astype(np.int64))
    n = images.shape[0] - a.test_rows
    train_x, train_y = images[:n].contiguous(), labels[:n].contiguous()
    test_x, test_y = images[n:].contiguous(), labels[n:].contiguous()

    c1, c2 = (int(v) for v in a.channels.split(","))
    h1, h2 = (int(v) for v in a.hidden.split(","))
    model = network(c1, c2, h1, h2)
    opt = torch.optim.Adam(model.parameters(), lr=a.lr, betas=(0.9, 0.999), eps=1e-8)
    loss_fn = nn.CrossEntropyLoss()

    epoch_s = []
    losses = []
    for epoch in range(a.epochs):
        order = torch.randperm(n)
        start = time.perf_counter()
        total = 0.0
        for b in range(0, n, a.batch):
            idx = order[b : b + a.batch]
            x, y = train_x[idx], train_y[idx]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
        epoch_s.append(time.perf_counter() - start)
        losses.append(total / n)
    with torch.no_grad():
        correct = (model(test_x).argmax(1) == test_y).sum().item()
    print(
        json.dumps(
            {
                "torch": torch.__version__,
                "threads": torch.get_num_threads(),
                "epoch_s": epoch_s,
                "loss": losses,
                "accuracy": correct / len(test_y),
            }
        )
    )


if __name__ == "__main__":
    main()
