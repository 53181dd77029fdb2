#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <unistd.h>
#include <pthread.h>
#include <time.h>
#include <sys/mman.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static const char*path; static int direct, nthreads; static long shift, req;
static long flen;
static void* run(void*a){ long i=(long)a; int fd=open(path,O_RDONLY|(direct?O_DIRECT:0)); char*buf; if(getenv("HUGE")){posix_memalign((void**)&buf,2<<20,req<(2<<20)?(2<<20):req); madvise(buf,req<(2<<20)?(2<<20):req,MADV_HUGEPAGE); for(long j=0;j<req;j+=4096) buf[j]=1;} else posix_memalign((void**)&buf,4096,req);
  long lo=flen/nthreads*i/ (4<<20) * (4<<20) + shift, hi=lo+flen/nthreads - (8<<20);
  for(long off=lo; off+req<=hi; off+=req) if(pread(fd,buf,req,off)!=req){perror("pread");exit(1);}
  close(fd); free(buf); return 0;}
int main(int argc,char**argv){ path=argv[1]; direct=atoi(argv[2]); nthreads=atoi(argv[3]); shift=atol(argv[4]); req=atol(argv[5]);
  int fd=open(path,O_RDONLY); flen=lseek(fd,0,SEEK_END); posix_fadvise(fd,0,0,POSIX_FADV_DONTNEED); close(fd);
  pthread_t t[64]; double s=now(); for(long i=0;i<nthreads;i++) pthread_create(&t[i],0,run,(void*)i); for(int i=0;i<nthreads;i++) pthread_join(t[i],0);
  double e=now()-s; long tot=(flen/nthreads-(8<<20))/req*req*nthreads; printf("direct=%d threads=%d shift=%ld req=%ld: %.0f MB/s\n",direct,nthreads,shift,req,tot/e/1e6); }
