import sys,re,statistics as st
import requests
for f in sys.argv[1:]:
    reqs=requests.load(f)
    big=[r for r in reqs if r[2]>=4<<20]
    a=min(r[0] for r in big); b=max(r[1] for r in big)
    inwin=reqs; a=min(r[0] for r in reqs)
    tot=sum(r[2] for r in inwin)
    # first big request start -> and data-size reqs
    small=[r for r in inwin if r[2]<=65536]
    lat=[r[1]-r[0] for r in big]
    # mean inflight bytes in window
    ev=sorted([(r[0],r[2]) for r in inwin]+[(r[1],-r[2]) for r in inwin])
    infl=0;area=0;prev=a
    for t,d in ev:
        if t>=a: area+=infl*(t-prev); prev=t
        infl+=d
    # time to 90% of bytes
    comp=sorted((r[1],r[2]) for r in inwin); c=0; t90=None
    for t,n in comp:
        c+=n
        if t90 is None and c>=0.9*tot: t90=t-a
    print(f"{f:22} span {1000*(b-a):4.0f} ms {tot/1e6:5.0f} MB {tot/1e6/(b-a):5.0f} MB/s  t90 {1000*t90:4.0f}  4MiB reqs {len(big)} lat med {1000*st.median(lat):5.1f} p90 {1000*sorted(lat)[int(.9*len(lat))]:5.1f}  small {len(small)}  inflight {area/(b-a)/1e6:4.0f} MB")
print()
for f in sys.argv[1:]:
    reqs=requests.load(f)
    reqs.sort()
    a=reqs[0][0]
    firstbig=min(r[0] for r in reqs if r[2]>=1<<20)
    # bytes completed in 50ms bins from a
    bins={}
    for r in reqs: bins[int((r[1]-a)/0.05)]=bins.get(int((r[1]-a)/0.05),0)+r[2]
    print(f"{f:22} first big issue at {1000*(firstbig-a):5.1f} ms; small before: {sum(1 for r in reqs if r[0]<firstbig)}; bins(GB/s):", " ".join(f"{bins.get(i,0)/0.05/1e9:.1f}" for i in range(max(bins)+1)))
