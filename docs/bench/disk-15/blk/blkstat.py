import sys,re,collections
for path in sys.argv[1:]:
    iss={}; ev=[]
    for l in open(path):
        mm=re.search(r' ([\d.]+): block_rq_(issue|complete): \S+ (\w+) (?:\d+ )?\(\) (\d+) \+ (\d+)',l)
        if not mm: continue
        t=float(mm.group(1)); kind=mm.group(2); sec=int(mm.group(4)); n=int(mm.group(5))
        if n<8192: continue
        if kind=='issue': iss[sec]=t
        elif sec in iss: ev.append((iss[sec],t,n*512))
    ev.sort()
    t0=ev[0][0]; t1=max(e[1] for e in ev); tot=sum(e[2] for e in ev)
    lat=sum(e[1]-e[0] for e in ev)/len(ev)
    print('%-28s 4 MiB requests %d, first issue to last completion %.3f s = %.0f MB/s, mean latency %.1f ms, mean in flight %.1f'%(path,len(ev),t1-t0,tot/(t1-t0)/1e6,lat*1e3,sum(e[1]-e[0] for e in ev)/(t1-t0)))
