#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>
#include <pthread.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <emmintrin.h>
static void ntcopy(char*d,const char*s,long n){ for(long i=0;i<n;i+=64){ __m128i a=_mm_load_si128((const __m128i*)(s+i)),b=_mm_load_si128((const __m128i*)(s+i+16)),c=_mm_load_si128((const __m128i*)(s+i+32)),e=_mm_load_si128((const __m128i*)(s+i+48)); _mm_stream_si128((__m128i*)(d+i),a);_mm_stream_si128((__m128i*)(d+i+16),b);_mm_stream_si128((__m128i*)(d+i+32),c);_mm_stream_si128((__m128i*)(d+i+48),e);} _mm_sfence(); }
/* mode 0: buffered pread into a shared 4K-page destination
   mode 1: direct pread into the shared destination
   mode 2: direct pread into a private THP staging buffer, memcpy into the shared destination */
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static const char*path; static int mode, nthreads; static long req, flen, dlen=256L<<20;
static char*dests[64],*stages[64];
static void* run(void*a){ long i=(long)a; int fd=open(path,O_RDONLY|(mode?O_DIRECT:0));
  char*dest=dests[i], *stage=stages[i];
  long lo=flen/nthreads*i/(4<<20)*(4<<20), hi=lo+flen/nthreads-(8<<20); long d=0;
  for(long off=lo; off+req<=hi; off+=req){ char*to=dest+d; d=(d+req)%dlen;
    if(mode>=2){ if(pread(fd,stage,req,off)!=req){perror("pread");exit(1);} if(mode==3) ntcopy(to,stage,req); else memcpy(to,stage,req);} 
    else if(pread(fd,to,req,off)!=req){perror("pread");exit(1);} }
  close(fd); return 0;}
int main(int argc,char**argv){ path=argv[1]; mode=atoi(argv[2]); nthreads=atoi(argv[3]); req=atol(argv[4]);
  int fd=open(path,O_RDONLY); flen=lseek(fd,0,SEEK_END); posix_fadvise(fd,0,0,POSIX_FADV_DONTNEED); close(fd);
  for(int i=0;i<nthreads;i++){ dests[i]=mmap(0,dlen,PROT_READ|PROT_WRITE,MAP_SHARED|MAP_ANONYMOUS|MAP_POPULATE,-1,0);
    if(mode>=2){long slen=req<(2<<20)?(2<<20):req; posix_memalign((void**)&stages[i],2<<20,slen); madvise(stages[i],slen,MADV_HUGEPAGE); memset(stages[i],1,slen);} }
  pthread_t t[64]; struct rusage r0,r1; getrusage(RUSAGE_SELF,&r0); double s=now();
  for(long i=0;i<nthreads;i++) pthread_create(&t[i],0,run,(void*)i); for(int i=0;i<nthreads;i++) pthread_join(t[i],0);
  double e=now()-s; getrusage(RUSAGE_SELF,&r1);
  double cpu=(r1.ru_utime.tv_sec-r0.ru_utime.tv_sec)+(r1.ru_stime.tv_sec-r0.ru_stime.tv_sec)+1e-6*((r1.ru_utime.tv_usec-r0.ru_utime.tv_usec)+(r1.ru_stime.tv_usec-r0.ru_stime.tv_usec));
  long tot=(flen/nthreads-(8<<20))/req*req*nthreads; printf("mode=%d threads=%d req=%ld: %.0f MB/s cpu %.2fs (wall %.2fs)\n",mode,nthreads,req,tot/e/1e6,cpu,e); }
