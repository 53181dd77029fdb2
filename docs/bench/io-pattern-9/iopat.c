// I/O pattern microbenchmark: how two readers' request order affects cold
// read throughput of one file. Modes:
//   procs   : 2 processes, own fd, each its contiguous half, 4 MiB preads
//   lanes   : 2 threads, one fd, each its contiguous half, 4 MiB preads
//   steps   : 2 threads, one fd, runs in step order (half A's runs of step s,
//             then half B's), each thread taking the next run as it finishes
// Destination: a 4 MiB buffer per reader (small) or a 256 MiB ring (ring).
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RUN (4u << 20)
#define STEP 12584192ull /* 64 x 196628 */
static int fd; static off_t len; static int ring; static int aligned;
static atomic_int next_run; static int nruns; static off_t *run_off; static size_t *run_len;

static atomic_int done_upto[2]; static int *run_half; static int *run_seq; static char **run_ptr; static volatile uint64_t sink; static int consume;
static pthread_mutex_t mu=PTHREAD_MUTEX_INITIALIZER; static pthread_cond_t cv=PTHREAD_COND_INITIALIZER;
static atomic_char *run_done;
static uint64_t touch(const char*p,size_t n){uint64_t h=0;const uint64_t*w=(const uint64_t*)p;for(size_t i=0;i<n/8;i++) h=((h<<5)|(h>>59))^w[i];return h;}
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static char *dest(size_t n){ char *p = mmap(0,n,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0); return p; }
static void read_range(int f, off_t lo, off_t hi, char *buf, size_t cap){
  size_t at=0;
  for(off_t o=lo;o<hi;o+=RUN){ size_t n = (hi-o)<RUN?(size_t)(hi-o):RUN; if(at+n>cap) at=0;
    if(pread(f,buf+at,n,o)!=(ssize_t)n){perror("pread");exit(1);} if(consume) sink+=touch(buf+at,n); if(ring) at+=n; }
}
struct half{off_t lo,hi; char*buf; size_t cap;};
static void *lane(void *a){struct half*h=a; read_range(fd,h->lo,h->hi,h->buf,h->cap); return 0;}
static void *stepper(void *a){ struct half*h=a; size_t at=0;
  for(;;){ int i=atomic_fetch_add(&next_run,1); if(i>=nruns) break; size_t n=run_len[i]; if(at+n>h->cap) at=0;
    if(pread(fd,h->buf+at,n,run_off[i])!=(ssize_t)n){perror("pread");exit(1);}
    if(consume){ run_ptr[i]=h->buf+at; pthread_mutex_lock(&mu); run_done[i]=1; pthread_cond_broadcast(&cv); pthread_mutex_unlock(&mu);} if(ring) at+=n; }
  return 0;}
static void *consumer(void *a){ int half=(int)(intptr_t)a; uint64_t h=0;
  for(int i=0;i<nruns;i++){ if(run_half[i]!=half) continue; pthread_mutex_lock(&mu); while(!run_done[i]) pthread_cond_wait(&cv,&mu); pthread_mutex_unlock(&mu); h+=touch(run_ptr[i],run_len[i]); }
  sink+=h; return 0;}
int main(int argc,char**argv){
  const char*path=argv[1],*mode=argv[2]; ring=!strcmp(argv[3],"ring");
  size_t cap = ring ? (256u<<20) : RUN;
  fd=open(path,O_RDONLY); len=lseek(fd,0,SEEK_END); off_t mid=len/2;
  posix_fadvise(fd,0,0,POSIX_FADV_DONTNEED);
  int dc=open("/proc/sys/vm/drop_caches",O_WRONLY); sync(); if(dc>=0){write(dc,"3",1);close(dc);}
  consume = argc>4 && !strcmp(argv[4],"sum");
  aligned = argc>4 && !strcmp(argv[4],"aligned");
  if(argc>4 && !strcmp(argv[4],"seq")) posix_fadvise(fd,0,0,POSIX_FADV_SEQUENTIAL);
  double t0=now();
  if(!strcmp(mode,"procs")){
    for(int i=0;i<2;i++) if(fork()==0){ int f=open(path,O_RDONLY); read_range(f,i?mid:0,i?len:mid,dest(cap),cap); _exit(0);} 
    while(wait(0)>0);
  } else {
    struct half h[2]={{0,mid,dest(cap),cap},{mid,len,dest(cap),cap}};
    pthread_t t[2];
    if(!strcmp(mode,"steps")){
      run_off=malloc(sizeof(off_t)*4096); run_len=malloc(sizeof(size_t)*4096); run_half=malloc(sizeof(int)*4096); run_ptr=malloc(sizeof(char*)*4096); run_done=calloc(4096,1);
      for(off_t s=0; s*STEP<mid; s++) for(int r=0;r<2;r++){ off_t base=r?mid:0, end=r?len:mid;
        off_t lo=base+s*STEP, hi=lo+STEP; if(hi>end) hi=end; if(lo>=end) continue;
        if(aligned){ off_t o=lo; while(o<hi){ off_t e=(o/RUN+1)*RUN; if(e>hi) e=hi; run_off[nruns]=o; run_len[nruns]=e-o; run_half[nruns]=r; nruns++; o=e; } }
        else for(off_t o=lo;o<hi;o+=RUN){ run_off[nruns]=o; run_len[nruns]=(hi-o)<RUN?(hi-o):RUN; run_half[nruns]=r; nruns++; } }
      pthread_t c[2];
      if(consume) for(int i=0;i<2;i++) pthread_create(&c[i],0,consumer,(void*)(intptr_t)i);
      for(int i=0;i<2;i++) pthread_create(&t[i],0,stepper,&h[i]);
      if(consume) for(int i=0;i<2;i++) pthread_join(c[i],0);
    } else for(int i=0;i<2;i++) pthread_create(&t[i],0,lane,&h[i]);
    for(int i=0;i<2;i++) pthread_join(t[i],0);
  }
  double s=now()-t0; printf("%s %s%s %.0f MB/s\n",mode,argv[3],argc>4?argv[4]:"",len/1e6/s); return 0; }
