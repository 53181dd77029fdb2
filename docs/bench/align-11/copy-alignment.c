#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <unistd.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int c,char**v){int fd=open(v[1],O_RDONLY);long fo=atol(v[2]),bo=atol(v[3]);size_t run=4<<20;
char*buf=aligned_alloc(4096,(run+8192)*64);off_t len=lseek(fd,0,SEEK_END);
for(int rep=0;rep<3;rep++){double t=now();size_t tot=0;for(off_t o=fo;o+run<=len;o+=run){size_t slot=((o/run)%64)*(run+8192);if(pread(fd,buf+slot+bo,run,o)!=run)return 1;tot+=run;}
double d=now()-t;printf("fo=%ld bo=%ld %.0f MB/s\n",fo,bo,tot/d/1e6);}}
