// ch FILE T CHUNK_MiB : T threads, one fd, file split into chunks of CHUNK MiB taken in order by
// the next free thread; each chunk read with 4 MiB preads in order. CHUNK 4 = runs alternate.
// T=0: 2 processes, own fd, halves (raw). Starts after a 4 KiB read at the end (like the index walk).
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#define RUN (4l<<20)
static int fd; static off_t len, chunk; static atomic_long nxt; static off_t first=20*4096;
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static void *w(void*a){ char*b=mmap(0,RUN,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS|MAP_POPULATE,-1,0);
  for(;;){ long c=atomic_fetch_add(&nxt,1); off_t lo=first+c*chunk; if(lo>=len) break; off_t hi=lo+chunk; if(hi>len) hi=len;
    for(off_t o=lo;o<hi;o+=RUN){ long n=hi-o<RUN?hi-o:RUN; if(pread(fd,b,n,o)!=n){perror("pread");exit(1);} } } return 0; }
int main(int c,char**v){ int T=atoi(v[2]); chunk=atol(v[3])<<20; fd=open(v[1],O_RDONLY); len=lseek(fd,0,SEEK_END);
  posix_fadvise(fd,0,0,POSIX_FADV_DONTNEED); int dc=open("/proc/sys/vm/drop_caches",O_WRONLY); sync(); if(dc>=0){write(dc,"3",1);close(dc);}
  char pg[4096]; pread(fd,pg,4096,len-4096); pread(fd,pg,4096,0);
  double t0=now();
  if(T==0){ for(int p=0;p<2;p++) if(fork()==0){int f=open(v[1],O_RDONLY); char*b=malloc(RUN); off_t lo=p?len/2:first,hi=p?len:len/2; for(off_t o=lo;o<hi;o+=RUN) if(pread(f,b,hi-o<RUN?hi-o:RUN,o)<0) _exit(1); _exit(0);} while(wait(0)>0); }
  else { pthread_t t[16]; for(int i=0;i<T;i++) pthread_create(&t[i],0,w,0); for(int i=0;i<T;i++) pthread_join(t[i],0); }
  printf("T%d chunk %ldM: %5.0f MB/s",T,chunk>>20,(len-first)/1e6/(now()-t0)); fflush(stdout); return 0; }
