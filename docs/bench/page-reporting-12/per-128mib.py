import os,time,sys
path=sys.argv[1]; n=int(sys.argv[2])
for rep in range(n):
    fd=os.open(path,os.O_RDONLY)
    os.posix_fadvise(fd,0,0,os.POSIX_FADV_DONTNEED)
    open('/proc/sys/vm/drop_caches','w').write('3')
    t0=time.time(); off=0; marks=[]; last=t0
    buf=bytearray(4<<20); mv=memoryview(buf)
    while True:
        k=os.preadv(fd,[mv],off)
        if k<=0: break
        off+=k
        if off % (128<<20) ==0:
            now=time.time(); marks.append(round(128/1.048576/(now-last))); last=now
    t=time.time()-t0; os.close(fd)
    print(f"{off/1e6/t:6.0f} MB/s  per-128MiB:", marks)
