#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <fcntl.h>
#include <unistd.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int c,char**v){ size_t n=(size_t)atol(v[2])<<20; int sum=atoi(v[3]); size_t req=4<<20;
 char*p=aligned_alloc(4096,n); memset(p,1,n);
 int fd=open(v[1],O_RDONLY); off_t L=lseek(fd,0,SEEK_END); uint64_t h=0;
 for(int r=0;r<3;r++){ double t=now(); off_t o=0; size_t slot=0; while(o<L){ char*d=p+slot*req; ssize_t k=pread(fd,d,req,o); if(k<=0)break; if(sum){ uint64_t*w=(uint64_t*)d; for(size_t i=0;i<(size_t)k/8;i++) h=((h<<5)|(h>>59))^w[i]; } o+=k; slot=(slot+1)%(n/req);} double d=now()-t; printf("buf %4zu MiB checksum %d: %.0f MB/s\n",n>>20,sum,L/d/1e6);} return (int)(h&1)*0; }
