# Paired runs, this directory: the engine at the start of the session
# (commit 48771c8, built into target/before) and after it (the commit named
# in sweep.txt, target/release), alternating, two invocations each per point.
git worktree add /tmp/before 48771c8
(cd /tmp/before && MPICC=mpicc.mpich CARGO_TARGET_DIR="$OLDPWD/target/before" \
   cargo build --release -p lmdbio-tools)
for pk in "4 1" "4 2" "8 1" "8 2"; do set -- $pk
  for i in 1 2; do
    for b in before after; do
      bin=target/release/lmdbio
      [ $b = before ] && bin=target/before/release/lmdbio
      mpiexec.mpich -n $1 $bin bench --method raw --method raw-node \
        --method lmdbio --repeat 3 --cold --ranks-per-node $2 \
        --json docs/bench/before-after/p$1-k$2-$b-$i.json target/bench-data/image-7700
    done
  done
done
