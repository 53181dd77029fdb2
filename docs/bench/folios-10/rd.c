// rd FILE MODE THREADS RUN_KB [advice] [ahead_runs]
// MODE: procs (THREADS processes, own fd, contiguous parts) | shared (THREADS threads, one fd, runs taken in file order)
// advice: normal|random|seq ; ahead_runs: issue readahead() this many runs ahead (shared only)
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
static int fd; static off_t len; static size_t run; static int ahead; static atomic_long next; static long nruns;
static atomic_long ra_upto;
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static void *worker(void *a){ char *buf=mmap(0,run,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS|MAP_POPULATE,-1,0);
  for(;;){ long i=atomic_fetch_add(&next,1); if(i>=nruns) break;
    if(ahead){ long want=i+ahead; long have=atomic_load(&ra_upto);
      while(have<want && have<nruns){ if(atomic_compare_exchange_weak(&ra_upto,&have,have+1)){ readahead(fd,(off_t)have*run,run); have++; } } }
    off_t o=(off_t)i*run; size_t n=(len-o)<(off_t)run?(size_t)(len-o):run;
    if(pread(fd,buf,n,o)!=(ssize_t)n){perror("pread");exit(1);} }
  return 0; }
int main(int c,char**v){ const char*path=v[1],*mode=v[2]; int T=atoi(v[3]); run=(size_t)atoi(v[4])<<10;
  const char*adv=c>5?v[5]:"normal"; ahead=c>6?atoi(v[6]):0;
  fd=open(path,O_RDONLY); len=lseek(fd,0,SEEK_END); nruns=(len+run-1)/run;
  posix_fadvise(fd,0,0,POSIX_FADV_DONTNEED); int dc=open("/proc/sys/vm/drop_caches",O_WRONLY); sync(); if(dc>=0){write(dc,"3",1);close(dc);}
  double t0=now();
  if(!strcmp(mode,"procs")){ for(int p=0;p<T;p++) if(fork()==0){ int f=open(path,O_RDONLY); off_t lo=len*p/T, hi=len*(p+1)/T; char*buf=malloc(run);
      for(off_t o=lo;o<hi;o+=run){ size_t n=(hi-o)<(off_t)run?(size_t)(hi-o):run; if(pread(f,buf,n,o)!=(ssize_t)n)_exit(1);} _exit(0);} while(wait(0)>0); }
  else { if(!strcmp(adv,"random")) posix_fadvise(fd,0,0,POSIX_FADV_RANDOM); if(!strcmp(adv,"seq")) posix_fadvise(fd,0,0,POSIX_FADV_SEQUENTIAL);
    pthread_t t[64]; for(int i=0;i<T;i++) pthread_create(&t[i],0,worker,0); for(int i=0;i<T;i++) pthread_join(t[i],0); }
  double s=now()-t0; printf("%s T%d %zuK %s ra%d: %.0f MB/s\n",mode,T,run>>10,adv,ahead,len/1e6/s); return 0; }
