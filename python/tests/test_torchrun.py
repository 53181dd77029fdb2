"""Reader under torchrun without MPI: each process reads its own share of
a WORLD_SIZE job; state_dict gathers through torch.distributed; a state
taken there resumes under MPI on another rank count."""

import json
import os
import subprocess
import sys

import pytest
from mpi4py import MPI

import lmdbio
from conftest import COMM

SCRIPT = r'''
import json, os, sys
import torch.distributed as dist
import lmdbio

path, out = sys.argv[1], sys.argv[2]
dist.init_process_group("gloo")
rank = dist.get_rank()
opts = dict(epochs=2, partition="strided", shuffle=True, seed=5)

def keys(reader, steps=None):
    got = []
    while steps is None or steps > 0:
        b = reader.next_batch()
        if b is None:
            break
        got += [(b.epoch, bytes(k).hex()) for k, _ in b]
        steps = None if steps is None else steps - 1
    return got

with lmdbio.Reader(path, 16, **opts) as r:
    whole = keys(r)
with lmdbio.Reader(path, 16, **opts) as r:
    head = keys(r, 7)
    state = r.state_dict()
with lmdbio.Reader(path, 16, state=state, **opts) as r:
    tail = keys(r)
with lmdbio.Reader(path, 16, epochs=1, partition="contiguous") as r:
    stopped = keys(r, 4)
    partial = r.state_dict()
    ranks = r.ranks
with open(f"{out}.{rank}", "w") as f:
    json.dump(dict(whole=whole, resumed=head + tail, state=partial, stopped=stopped,
                   ranks=ranks), f)
dist.destroy_process_group()
'''


@pytest.mark.skipif(COMM.size != 1, reason="torchrun launches its own processes")
def test_torchrun_shares_resume_and_repartition(layouts, tmp_path):
    path, _, records = layouts["small"]
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PMI_", "HYDRA", "MPIR", "OMPI_", "PMIX"))}
    run = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone",
         "--nproc-per-node=3", str(script), path, str(out)],
        capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"out.{r}").read_text()) for r in range(3)]
    assert all(r["ranks"] == 3 for r in ranks)
    expected = sorted(k.hex() for k in records)
    for epoch in (0, 1):
        got = sorted(k for r in ranks for e, k in r["whole"] if e == epoch)
        assert got == expected, f"epoch {epoch}"
    assert all(r["resumed"] == r["whole"] for r in ranks)
    # The torchrun job's state resumes under MPI on one rank.
    state = ranks[0]["state"]
    assert all(r["state"] == state for r in ranks)
    with pytest.raises(lmdbio.Error):
        lmdbio.Reader(path, 16, comm=MPI.COMM_SELF, epochs=1, state=state)
    with lmdbio.Reader(path, 16, comm=MPI.COMM_SELF, epochs=1, state=state,
                       repartition=True) as r:
        rest = [bytes(k).hex() for b in r for k, _ in b]
    first = [k for r in ranks for _, k in r["stopped"]]
    assert sorted(first + rest) == expected
