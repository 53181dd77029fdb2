"""Opening time, first batch, seconds and ratio of every invocation in a
directory of ab-bins.sh JSON files."""
import json,sys,glob,os
for f in sorted(glob.glob(sys.argv[1]+'/*.json')):
    j=json.load(open(f)); r={x['method']:x for x in j['runs']}; l=r['lmdbio']
    print(f"{os.path.basename(f):22} open {l['open_s']*1e3:5.1f} ms first {l['time_to_first_batch_s']*1e3:6.1f} sec {l['seconds']:.3f} raw sec {r['raw']['seconds']:.3f} node {r['raw-node']['seconds']:.3f} agree {l['agreement_wait_s_per_rank']:.3f} ratio {l['ratio_to_raw']:.2f}")
