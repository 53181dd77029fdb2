#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
static int fd; static off_t len; static long run; static atomic_long nxt;
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static void*w(void*a){ void*b; posix_memalign(&b,4096,run); for(;;){ long i=atomic_fetch_add(&nxt,1); off_t o=i*run; if(o>=len) break; long n=len-o<run?len-o:run; n=(n+4095)/4096*4096; if(pread(fd,b,n,o)<0){perror("pread");exit(1);} } return 0; }
int main(int c,char**v){ int T=atoi(v[2]); run=atol(v[3])<<10; int f0=open(v[1],O_RDONLY); len=lseek(f0,0,SEEK_END); posix_fadvise(f0,0,0,POSIX_FADV_DONTNEED);
 int dc=open("/proc/sys/vm/drop_caches",O_WRONLY); sync(); if(dc>=0){write(dc,"3",1);close(dc);}
 fd=open(v[1],O_RDONLY|O_DIRECT); double t0=now(); pthread_t t[64]; for(int i=0;i<T;i++) pthread_create(&t[i],0,w,0); for(int i=0;i<T;i++) pthread_join(t[i],0);
 printf("direct T%d %ldK: %.0f MB/s\n",T,run>>10,len/1e6/(now()-t0)); return 0; }
