/* Exploratory (fifth round): memcpy into a 256 MiB buffer in 4 MiB chunks,
 * then a checksum pass over all of it, with and without MADV_HUGEPAGE, private
 * and shared. gcc -O2 touch-over-pages.c; ./a.out HUGE SHARED */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/mman.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static uint64_t touch(uint64_t h,const uint64_t*p,size_t n){for(size_t i=0;i<n;i++){h=(h<<5|h>>59)^p[i];}return h;}
int main(int argc,char**argv){
  size_t len=256ul<<20, chunk=4ul<<20; int huge=atoi(argv[1]); int shared=atoi(argv[2]);
  char*src=aligned_alloc(4096,chunk); memset(src,7,chunk);
  char*w=mmap(0,len+(2<<20),PROT_READ|PROT_WRITE,(shared?MAP_SHARED:MAP_PRIVATE)|MAP_ANONYMOUS,-1,0);
  w=(char*)(((uintptr_t)w+(2<<20)-1)&~((uintptr_t)(2<<20)-1));
  if(huge) madvise(w,len,MADV_HUGEPAGE);
  madvise(w,len,MADV_POPULATE_WRITE);
  uint64_t h=0;
  for(int rep=0;rep<3;rep++){
    double t0=now(); for(size_t o=0;o<len;o+=chunk) memcpy(w+o,src,chunk); double t1=now();
    h=touch(h,(uint64_t*)w,len/8); double t2=now();
    for(size_t o=0;o<len;o+=chunk){memcpy(w+o,src,chunk); h=touch(h,(uint64_t*)(w+o),chunk/8);} double t3=now();
    printf("huge=%d shared=%d copy %.2f GB/s, touch after all %.2f GB/s, copy+touch per chunk %.2f GB/s\n",huge,shared,len/(t1-t0)/1e9,len/(t2-t1)/1e9,len/(t3-t2)/1e9);
  }
  printf("%lu\n",(unsigned long)h); return 0;
}
