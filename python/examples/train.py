"""Data-parallel training of a small CNN on a Caffe LMDB through lmdbio.

    mpiexec -n 2 python python/examples/train.py DB --epochs 3 --checkpoint ckpt.pt

Ranks and world size come from MPI (torch.distributed over gloo, CPU);
each rank reads its share of every epoch through lmdbio.torch.CaffeDataset
(one reader per node, zero-copy batches decoded on a thread pool). Every
--save-every steps the job saves a checkpoint holding the model, the
optimizer and the reader's state_dict(); run the same command again and it
continues exactly where the checkpoint was taken. With --repartition it may
continue on another rank count (the rest of the interrupted epoch is split
among the new ranks).

The database: any Caffe LMDB of same-sized images, e.g.

    target/release/lmdbio-sample-images /tmp/images 10 200 32 png
    target/release/lmdbio convert --folders /tmp/images /tmp/train_lmdb
"""

import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader

import lmdbio.torch


class SmallCNN(nn.Module):
    def __init__(self, channels, classes):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(channels, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4),
            nn.Flatten(), nn.Linear(32 * 16, classes))

    def forward(self, x):
        return self.net(x)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("db")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch", type=int, default=32, help="records per rank per step")
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--checkpoint", default="checkpoint.pt")
    p.add_argument("--save-every", type=int, default=20)
    p.add_argument("--max-steps", type=int, default=None,
                   help="stop after this many steps (to try resuming)")
    p.add_argument("--repartition", action="store_true",
                   help="allow resuming a checkpoint taken on another rank count")
    args = p.parse_args()

    rank, world = lmdbio.torch.init_process_group("gloo")
    torch.manual_seed(0)
    resume = torch.load(args.checkpoint, weights_only=False) \
        if os.path.exists(args.checkpoint) else None

    dataset = lmdbio.torch.CaffeDataset(
        args.db, args.batch, epochs=args.epochs, shuffle=True, seed=42,
        state=resume and resume["reader"], repartition=args.repartition)
    loader = DataLoader(dataset, batch_size=None, num_workers=0)
    images, _ = next(iter(lmdbio.torch.CaffeDataset(args.db, 1, epochs=1,
                                                    comm=_self_comm())))
    model = nn.parallel.DistributedDataParallel(SmallCNN(images.shape[1], args.classes))
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    step = 0
    if resume:
        model.module.load_state_dict(resume["model"])
        opt.load_state_dict(resume["optimizer"])
        step = resume["step"]
        if rank == 0:
            print(f"resumed at step {step} from {args.checkpoint}")

    while dataset.reader.step < (dataset.reader.step_limit or 0):
        for x, y in loader:
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x.float() / 255), y)
            loss.backward()
            opt.step()
            step += 1
            if rank == 0 and step % 10 == 0:
                print(f"step {step} loss {loss.item():.4f}")
            if step % args.save_every == 0:
                save(args.checkpoint, model, opt, dataset, step, rank)
            if args.max_steps is not None and step >= args.max_steps:
                save(args.checkpoint, model, opt, dataset, step, rank)
                dataset.close()
                dist.destroy_process_group()
                return
    if rank == 0:
        print(f"done: {step} steps on {world} rank(s)")
    dataset.close()
    dist.destroy_process_group()


def save(path, model, opt, dataset, step, rank):
    # state_dict() is collective: every rank calls it, rank 0 writes.
    reader_state = dataset.state_dict()
    if rank == 0:
        torch.save({"model": model.module.state_dict(), "optimizer": opt.state_dict(),
                    "reader": reader_state, "step": step}, path + ".tmp")
        os.replace(path + ".tmp", path)


def _self_comm():
    """Peeks at one record's shape without joining the job's reader."""
    from mpi4py import MPI

    return MPI.COMM_SELF


if __name__ == "__main__":
    main()
