#!/bin/bash
# P = 2, two ranks per node: the default (labelled old: two read streams for
# the machine's one reader) against --read-streams 4 (labelled new, through
# a wrapper that inserts the flag after `bench`), code at ecd5ff3.
# Run from the repository root.
set -eu
cat > /tmp/lmdbio-s4 <<'W'
#!/bin/bash
args=("$@"); exec target/release/lmdbio "${args[0]}" --read-streams 4 "${args[@]:1}"
W
chmod +x /tmp/lmdbio-s4
POINTS="2:2" PAIRS="1 2 3" scripts/bench-ab.sh docs/bench/streams-p2k2-8 target/release/lmdbio /tmp/lmdbio-s4
