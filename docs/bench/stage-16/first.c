#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <unistd.h>
#include <pthread.h>
#include <time.h>
/* Each of N threads (own fd) reads FIRST bytes of its part in 4 MiB preads, then the rest of
   its part; prints time to FIRST and total. mode: 0 fresh fd; 1 after 12 random 4 KiB reads
   spread over the file + DONTNEED of them; 2 = 1 + FADV_SEQUENTIAL; 3 = 1 + WILLNEED of the
   part's first 16 MiB before reading; 4 = fresh + FADV_SEQUENTIAL */
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static const char*path; static int mode,n; static long flen, first=12582912, req=4<<20; static double t0, tfirst[64], tall[64];
static void*run(void*a){ long i=(long)a; int fd=open(path,O_RDONLY); char*buf=malloc(req);
  long lo=flen/n*i/req*req, hi=lo+flen/n/req*req;
  if(mode>=1&&mode<=3){ for(int k=0;k<12;k++){ long off=(flen/4096)*k/12*4096 + i*4096*7; pread(fd,buf,4096,off); posix_fadvise(fd,off,4096,POSIX_FADV_DONTNEED);} }
  if(mode==2||mode==4) posix_fadvise(fd,0,0,POSIX_FADV_SEQUENTIAL);
  if(mode==3) posix_fadvise(fd,lo,16<<20,POSIX_FADV_WILLNEED);
  long done=0; for(long off=lo; off+req<=hi; off+=req){ if(pread(fd,buf,req,off)!=req){perror("pread");exit(1);} done+=req; if(done>=first&&!tfirst[i]) tfirst[i]=now()-t0; }
  tall[i]=now()-t0; close(fd); free(buf); return 0;}
int main(int c,char**v){ path=v[1]; mode=atoi(v[2]); n=atoi(v[3]); int fd=open(path,O_RDONLY); flen=lseek(fd,0,SEEK_END); close(fd);
  pthread_t t[64]; t0=now(); for(long i=0;i<n;i++) pthread_create(&t[i],0,run,(void*)i); for(int i=0;i<n;i++) pthread_join(t[i],0);
  double mf=0,ma=0; for(int i=0;i<n;i++){ if(tfirst[i]>mf) mf=tfirst[i]; if(tall[i]>ma) ma=tall[i]; }
  printf("mode=%d n=%d: first %.3f s, all %.2f s, %.0f MB/s\n",mode,n,mf,ma,(double)(flen/n/req*req*n)/ma/1e6); }
