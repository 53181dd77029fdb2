#!/usr/bin/env python3
"""Fault and fuzz run of the `lmdbio` command, as an outside probe tries it.

Seeded and bounded: every case runs under a time limit and the whole run
stops starting cases after --seconds. Each outcome is one of
  clean  the command failed with an `lmdbio: ...` message (or succeeded
         where success is right),
  crash  killed by a signal, a panic, or an exit without a message,
  hang   still running at the case's time limit,
  wrong  succeeded with output that differs from liblmdb's `mdb_dump` on a
         file mdb_dump reads (damaged files), or succeeded where it must
         refuse (special files, convert over its input, disagreeing ranks).
It prints a Markdown table (the one in docs/reliability.md) and exits 1 on
any crash, hang or wrong outcome.

usage: scripts/fault-fuzz.py [--seed N] [--seconds S] [--mutations N]
       [--smoke] [--bin target/debug]

Needs the binaries `lmdbio` and `lmdbio-sample-db` in --bin (cargo build
-p lmdbio-tools -p lmdbio-testkit --bins), mdb_dump (lmdb-utils),
mpiexec.mpich and mkfifo.
"""

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict


def run(cmd, limit, **kw):
    """(returncode or None on a hang, stdout, stderr)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         start_new_session=True, **kw)
    try:
        out, err = p.communicate(timeout=limit)
        return p.returncode, out, err
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        return None, out, err


def judge(rc, err, must_fail=False):
    text = err.decode(errors="replace")
    if rc is None:
        return "hang"
    if rc < 0 or rc >= 128 or "panicked" in text:
        return "crash"
    if rc == 0:
        return "wrong" if must_fail else "clean"
    return "clean" if "lmdbio" in text else "crash"


class Tally:
    def __init__(self):
        self.rows = defaultdict(Counter)
        self.notes = []

    def add(self, family, outcome, what=""):
        self.rows[family][outcome] += 1
        if outcome in ("crash", "hang", "wrong"):
            self.notes.append(f"{family}: {outcome}: {what}")

    def table(self):
        lines = ["| cases | tried | clean | crashes | hangs | wrong |",
                 "|---|---:|---:|---:|---:|---:|"]
        for family, c in self.rows.items():
            tried = sum(c.values())
            lines.append(f"| {family} | {tried} | {c['clean']} | {c['crash']} "
                         f"| {c['hang']} | {c['wrong']} |")
        return "\n".join(lines)


def damaged_files(t, lmdbio, work, base, rng, count, deadline):
    """Random byte damage to the meta and tree pages, under dump, inspect
    and a one-rank bench; dump's output is compared with mdb_dump's."""
    data = open(os.path.join(base, "data.mdb"), "rb").read()
    psize = 4096
    pages = len(data) // psize
    for i in range(count):
        if time.time() > deadline and i >= 3:
            break
        b = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            page = rng.choice([0, 1] + list(range(2, pages)))
            at = page * psize + rng.choice([rng.randrange(16, 160), rng.randrange(psize)])
            b[at] = rng.randrange(256)
        d = os.path.join(work, f"m{i}")
        os.makedirs(d)
        open(os.path.join(d, "data.mdb"), "wb").write(b)
        theirs = run(["mdb_dump", d], 20)
        for sub in (["dump"], ["inspect"], ["bench", "--method", "lmdbio", "--batch", "8"]):
            rc, out, err = run([lmdbio] + sub + [d], 30)
            outcome = judge(rc, err)
            if (sub == ["dump"] and outcome == "clean" and rc == 0
                    and theirs[0] == 0 and out != theirs[1]):
                outcome = "wrong"
            t.add("damaged file (dump, inspect, bench)", outcome, f"{sub[0]} {d}")
        shutil.rmtree(d)


def special_files(t, lmdbio, work):
    fifo_dir = os.path.join(work, "fifo-db")
    os.makedirs(fifo_dir)
    os.mkfifo(os.path.join(fifo_dir, "data.mdb"))
    fifo = os.path.join(work, "fifo.mdb")
    os.mkfifo(fifo)
    for path in (fifo_dir, fifo, "/dev/zero", "/dev/null"):
        for sub in (["dump"], ["inspect"], ["bench", "--method", "lmdbio"]):
            rc, _, err = run([lmdbio] + sub + [path], 15)
            t.add("FIFO or device as the database", judge(rc, err, must_fail=True),
                  f"{sub[0]} {path}")


def tiny_png():
    """A valid 2x2 grey PNG."""
    import struct
    import zlib

    def chunk(kind, body):
        return (struct.pack(">I", len(body)) + kind + body
                + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF))
    raw = b"\0\x10\x20\0\x30\x40"
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 2, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def convert_cases(t, lmdbio, work, sample_db):
    root = os.path.join(work, "imgs")
    cls = os.path.join(root, "c0")
    os.makedirs(cls)
    png = tiny_png()
    for i in range(4):
        open(os.path.join(cls, f"{i}.png"), "wb").write(png)
    os.mkfifo(os.path.join(cls, "pipe.png"))
    lst = os.path.join(work, "list.txt")
    open(lst, "w").write("".join(f"c0/{i}.png 0\n" for i in range(4)))
    before = sorted(os.listdir(cls))
    for what, out in (("OUT is ROOT", root), ("OUT holds ROOT", work),
                      ("OUT in ROOT", os.path.join(cls, "db")), ("OUT is LIST", lst)):
        rc, _, err = run([lmdbio, "convert", "--overwrite", root, lst, out], 30)
        t.add("convert over its own input", judge(rc, err, must_fail=True), what)
    if sorted(os.listdir(cls)) != before or not os.path.exists(lst):
        t.add("convert over its own input", "wrong", "an input changed")
    rc, _, err = run([lmdbio, "convert", "--folders", root, os.path.join(work, "f")], 30)
    t.add("convert with a FIFO among the images", judge(rc, err), "folders")
    # Killed mid-run (SIGTERM, then kill -9 and a rerun): no partial left.
    many = os.path.join(work, "many.txt")
    open(many, "w").write("c0/0.png 0\n" * 200000)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        out = os.path.join(work, "killed")
        p = subprocess.Popen([lmdbio, "convert", "--threads", "1", root, many, out],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(1.0)
        p.send_signal(sig)
        try:
            p.wait(timeout=15)
            outcome = "clean"
        except subprocess.TimeoutExpired:
            p.kill()
            outcome = "hang"
        if sig == signal.SIGKILL:
            rc, _, err = run([lmdbio, "convert", "--overwrite", root, lst, out], 60)
            outcome = judge(rc, err) if outcome == "clean" else outcome
        partials = [n for n in os.listdir(work) if "lmdbio-partial" in n]
        if partials and outcome == "clean":
            outcome = "wrong"
        t.add("convert killed mid-run", outcome, signal.Signals(sig).name)


def mpi_cases(t, lmdbio, db, db2):
    def mpmd(per_rank, limit=60):
        cmd = ["mpiexec.mpich"]
        for i, args in enumerate(per_rank):
            cmd += ([":"] if i else []) + ["-n", "1", lmdbio, "bench", "--method", "lmdbio"] + args
        return run(cmd, limit)
    for what, per_rank in (
            ("path", [[db], [db2]]),
            ("batch", [["--batch", "4", db], ["--batch", "8", db]]),
            ("ranks per node", [["--ranks-per-node", "1", db], ["--ranks-per-node", "2", db]]),
            ("window", [["--window", "8388608", db], [db]]),
            ("shuffle", [["--shuffle", "1", db], [db]]),
            ("tail", [["--tail", "short", db], [db]])):
        rc, _, err = mpmd(per_rank)
        ok = rc not in (None, 0) and err.count(b"the ranks disagree") == len(per_rank)
        t.add("ranks that disagree", "clean" if ok else judge(rc, err, must_fail=True), what)
    # A stopped rank: the others fail within the timeout.
    p = subprocess.Popen(["mpiexec.mpich", "-n", "3", lmdbio, "bench", "--method", "lmdbio",
                          "--batch", "4", "--epochs", "100000", "--compute-ms", "2",
                          "--timeout", "3", db],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    victim = None
    started = time.time()
    while victim is None and time.time() - started < 20:
        time.sleep(0.2)
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
                ppid = int([l for l in open(f"/proc/{pid}/status") if l.startswith("PPid")][0].split()[1])
                gpid = int([l for l in open(f"/proc/{ppid}/status") if l.startswith("PPid")][0].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if b"PMI_RANK=1" in env and gpid == p.pid:
                victim = int(pid)
    time.sleep(3)
    outcome = "crash"
    if victim:
        os.kill(victim, signal.SIGSTOP)
        try:
            _, err = p.communicate(timeout=20)
            outcome = "clean" if b"did not arrive" in err or b"a reader" in err else "crash"
        except subprocess.TimeoutExpired:
            outcome = "hang"
        finally:
            try:
                os.kill(victim, signal.SIGKILL)
            except OSError:
                pass
            p.kill()
            p.wait()
    t.add("a stopped rank (SIGSTOP)", outcome)


def dump_records(path):
    """{key hex: (len, sha256 hex)} of what mdb_dump prints."""
    import hashlib
    out = subprocess.run(["mdb_dump", path], check=True, capture_output=True).stdout
    lines = out.decode().split("\n")
    body = lines[lines.index("HEADER=END") + 1:]
    recs = {}
    for k, v in zip(body[0::2], body[1::2]):
        if not k.startswith(" "):
            break
        value = bytes.fromhex(v.strip())
        recs[k.strip()] = (len(value), hashlib.sha256(value).hexdigest())
    return recs


def held_open(path):
    """Whether another process holds `path` open."""
    for p in os.listdir("/proc"):
        if not p.isdigit() or int(p) == os.getpid():
            continue
        try:
            for f in os.listdir(f"/proc/{p}/fd"):
                if os.readlink(f"/proc/{p}/fd/{f}") == path:
                    return True
        except OSError:
            continue
    return False


def concurrent_writer(t, lmdbio, sample, work, rng, trials, deadline):
    """mdb_load transactions overwriting existing keys while a 4-rank job
    reads; every traced record must be the opened snapshot's."""
    for trial in range(trials):
        if time.time() > deadline:
            break
        db = os.path.join(work, f"w{trial}")
        subprocess.run([sample, db, "1500", "24", "3"], check=True, stdout=subprocess.DEVNULL)
        snap = dump_records(db)
        keys = list(snap)
        trace = os.path.join(work, f"trace{trial}")
        os.makedirs(trace)
        job = subprocess.Popen(["mpiexec.mpich", "-n", "4", lmdbio, "bench", "--method", "lmdbio",
                                "--batch", "8", "--epochs", "60", "--window", "4194304",
                                "--prefetch", "2", "--trace", trace, db],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        data = os.path.realpath(os.path.join(db, "data.mdb"))
        started = time.time()
        while time.time() - started < 30 and not held_open(data):
            time.sleep(0.01)
        time.sleep(0.3)
        # The job's reader slot keeps the snapshot's pages from reuse, so the
        # file grows with every transaction: give the writer room to grow.
        while job.poll() is None and time.time() - started < 60:
            text = "VERSION=3\nformat=bytevalue\nmapsize=1073741824\ntype=btree\nHEADER=END\n"
            for k in rng.sample(keys, 20):
                text += f" {k}\n {os.urandom(rng.randrange(1500, 4500)).hex()}\n"
            text += "DATA=END\n"
            load = subprocess.run(["mdb_load", db], input=text.encode(), capture_output=True)
            if load.returncode != 0:
                raise SystemExit(f"fault-fuzz: mdb_load failed: {load.stderr.decode(errors='replace')}")
        _, err = job.communicate()
        wrong = 0
        for name in os.listdir(trace):
            for line in open(os.path.join(trace, name)):
                f = line.split()
                if snap.get(f[-3]) != (int(f[-2]), f[-1]):
                    wrong += 1
        if wrong:
            t.add("concurrent writer (4 ranks)", "wrong", f"trial {trial}: {wrong} records")
        elif job.returncode == 0 or b"the database changed during the job" in err:
            t.add("concurrent writer (4 ranks)", "clean")
        else:
            t.add("concurrent writer (4 ranks)", "crash", err.decode(errors="replace")[-200:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--mutations", type=int, default=300)
    ap.add_argument("--writer-trials", type=int, default=10)
    ap.add_argument("--smoke", action="store_true", help="a run of under a minute")
    ap.add_argument("--bin", default="target/debug")
    a = ap.parse_args()
    if a.smoke:
        a.seconds, a.mutations = min(a.seconds, 25), min(a.mutations, 12)
        a.writer_trials = min(a.writer_trials, 1)
    lmdbio = os.path.abspath(os.path.join(a.bin, "lmdbio"))
    sample = os.path.abspath(os.path.join(a.bin, "lmdbio-sample-db"))
    rng = random.Random(a.seed)
    deadline = time.time() + a.seconds
    t = Tally()
    with tempfile.TemporaryDirectory(prefix="lmdbio-fault-") as work:
        db = os.path.join(work, "db")
        db2 = os.path.join(work, "db2")
        for d, n in ((db, 300), (db2, 200)):
            subprocess.run([sample, d, str(n), "16", "1"], check=True,
                           stdout=subprocess.DEVNULL)
        special_files(t, lmdbio, work)
        convert_cases(t, lmdbio, work, db)
        mpi_cases(t, lmdbio, db, db2)
        concurrent_writer(t, lmdbio, sample, work, rng, a.writer_trials, deadline)
        damaged_files(t, lmdbio, work, db, rng, a.mutations, deadline)
    print(f"seed {a.seed}, {a.mutations} mutations and {a.writer_trials} writer trials at most, "
          f"{a.seconds:.0f} s budget\n")
    print(t.table())
    for n in t.notes:
        print("  " + n)
    sys.exit(1 if t.notes else 0)


if __name__ == "__main__":
    main()
