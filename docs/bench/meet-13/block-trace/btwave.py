import sys,re
import requests
for f in sys.argv[1:]:
    reqs=requests.load(f)
    comp=sorted((r[1],r[2]) for r in reqs)
    a=min(r[0] for r in reqs)
    waves=[];cur=[comp[0]]
    for c in comp[1:]:
        if c[0]-cur[-1][0]>0.002: waves.append(cur); cur=[c]
        else: cur.append(c)
    waves.append(cur)
    print(f, " ".join(f"{1000*(w[0][0]-a):.0f}:{sum(x[1] for x in w)/2**20:.0f}" for w in waves if sum(x[1] for x in w)>8<<20))
