// pat FILE MODE [ahead_MiB]
// The reader's pattern at P=2 two per node: two regions (halves), steps of STEP bytes per region,
// 4 MiB runs, read in step order (region A's step s, then B's step s).
// MODE: procs   - 2 processes, own fd, each one half in order (raw)
//       steps   - 1 fd, 2 threads taking runs in step order
//       stepsra - steps + the taker issues WILLNEED for runs up to ahead MiB past (per region) ; fd FADV_RANDOM
//       stepsran- steps + WILLNEED ahead, heuristics left on (NORMAL)
//       lanesra - 1 fd, thread per region, WILLNEED ahead in own region; fd FADV_RANDOM
//       lanes   - 1 fd, thread per region
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
#define STEP 12584192l
static int fd; static off_t len, mid; static long ahead; static const char*mode;
static off_t roff[4096]; static long rlen[4096]; static int rreg[4096]; static int nr; static atomic_int nxt;
static off_t ra_done[2]; static pthread_mutex_t ramu=PTHREAD_MUTEX_INITIALIZER;
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static char*buf(void){return mmap(0,RUN,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS|MAP_POPULATE,-1,0);}
static void ra_to(int reg, off_t upto){ off_t end=reg?len:mid; if(upto>end) upto=end;
  pthread_mutex_lock(&ramu); off_t from=ra_done[reg]; if(upto>from) ra_done[reg]=upto; pthread_mutex_unlock(&ramu);
  if(upto>from) posix_fadvise(fd,from,upto-from,POSIX_FADV_WILLNEED); }
static void rd(int f,char*b,off_t o,long n){ if(pread(f,b,n,o)!=n){perror("pread");exit(1);} }
static void *taker(void*a){ char*b=buf(); for(;;){ int i=atomic_fetch_add(&nxt,1); if(i>=nr) break;
    if(ahead) ra_to(rreg[i], roff[i]+rlen[i]+ahead); rd(fd,b,roff[i],rlen[i]); } return 0; }
static void *lane(void*a){ int reg=(int)(long)a; char*b=buf(); off_t lo=reg?mid:0, hi=reg?len:mid;
  for(off_t o=lo;o<hi;o+=RUN){ long n=hi-o<RUN?hi-o:RUN; if(ahead) ra_to(reg,o+n+ahead); rd(fd,b,o,n);} return 0; }
int main(int c,char**v){ mode=v[2]; ahead=c>3?atol(v[3])<<20:0;
  fd=open(v[1],O_RDONLY); len=lseek(fd,0,SEEK_END); mid=len/2; ra_done[0]=0; ra_done[1]=mid;
  posix_fadvise(fd,0,0,POSIX_FADV_DONTNEED); int dc=open("/proc/sys/vm/drop_caches",O_WRONLY); sync(); if(dc>=0){write(dc,"3",1);close(dc);}
  for(long s=0;s*STEP<mid;s++) for(int r=0;r<2;r++){ off_t base=r?mid:0,end=r?len:mid; off_t lo=base+s*STEP,hi=lo+STEP; if(hi>end)hi=end; if(lo>=end)continue;
    for(off_t o=lo;o<hi;o+=RUN){roff[nr]=o;rlen[nr]=hi-o<RUN?hi-o:RUN;rreg[nr]=r;nr++;} }
  if(strstr(mode,"ra") && !strstr(mode,"ran")) posix_fadvise(fd,0,0,POSIX_FADV_RANDOM);
  double t0=now(); pthread_t t[2];
  if(!strcmp(mode,"procs")){ for(int p=0;p<2;p++) if(fork()==0){int f=open(v[1],O_RDONLY); char*b=buf(); off_t lo=p?mid:0,hi=p?len:mid; for(off_t o=lo;o<hi;o+=RUN) rd(f,b,o,hi-o<RUN?hi-o:RUN); _exit(0);} while(wait(0)>0); }
  else if(!strncmp(mode,"lanes",5)){ for(long i=0;i<2;i++) pthread_create(&t[i],0,lane,(void*)i); for(int i=0;i<2;i++) pthread_join(t[i],0); }
  else { int T=strstr(mode,"1")?1:2; for(int i=0;i<T;i++) pthread_create(&t[i],0,taker,0); for(int i=0;i<T;i++) pthread_join(t[i],0); }
  printf("%-8s ahead %3ld MiB: %5.0f MB/s\n",mode,ahead>>20,len/1e6/(now()-t0)); return 0; }
