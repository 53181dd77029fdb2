#define _GNU_SOURCE
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>
static volatile int stop=0; static const char*path;
#include <sys/resource.h>
#include <sys/syscall.h>
static void* hog(void*a){ if(getenv("HOGNICE")) setpriority(PRIO_PROCESS, syscall(SYS_gettid), atoi(getenv("HOGNICE")));
  int fd=open(path,O_RDONLY); size_t n=4<<20; char*b=aligned_alloc(4096,n); off_t o=((long)a)*(64L<<20);
  while(!stop){ if(pread(fd,b,n,o)<=0) o=0; else o+=n; if(o>1400L<<20) o=0; } return 0;}
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static void polite(MPI_Request*r,int mode){ double st=now(); double pause=20e-6;
  for(;;){int d=0; MPI_Test(r,&d,MPI_STATUS_IGNORE); if(d) return;
    if(mode==1){ struct timespec ts={0,(long)(pause*1e9)}; nanosleep(&ts,0); double cap=(now()-st)/20; if(cap<100e-6)cap=100e-6; if(cap>1e-3)cap=1e-3; pause*=2; if(pause>cap)pause=cap; }
    else if(mode==2){ struct timespec ts={0,50000}; nanosleep(&ts,0);} } }
int main(int c,char**v){int prov; MPI_Init_thread(&c,&v,MPI_THREAD_FUNNELED,&prov); int r; MPI_Comm_rank(MPI_COMM_WORLD,&r);
  path=v[1]; int hogs=atoi(v[2]); int mode=atoi(v[3]);
  pthread_t t; if(hogs) pthread_create(&t,0,hog,(void*)(long)r);
  MPI_Barrier(MPI_COMM_WORLD); double tot=0,mx=0; int N=40; double en[40],ex[40];
  for(int i=0;i<N;i++){ long x[3]={r,i,5},y[3]; usleep(20000+ (r*3000)%7000); double t0=now();
    if(mode==0) MPI_Allreduce(x,y,3,MPI_LONG,MPI_MIN,MPI_COMM_WORLD);
    else { MPI_Request q; MPI_Iallreduce(x,y,3,MPI_LONG,MPI_MIN,MPI_COMM_WORLD,&q); polite(&q,mode);} 
    double d=now()-t0; en[i]=t0; ex[i]=now(); tot+=d; if(d>mx)mx=d; }
  stop=1; if(hogs) pthread_join(t,0);
  double all; MPI_Reduce(&tot,&all,1,MPI_DOUBLE,MPI_SUM,0,MPI_COMM_WORLD);
  double men[40],mex[40]; MPI_Reduce(en,men,N,MPI_DOUBLE,MPI_MAX,0,MPI_COMM_WORLD); MPI_Reduce(ex,mex,N,MPI_DOUBLE,MPI_MAX,0,MPI_COMM_WORLD);
  if(r==0){ double s=0,m=0; for(int i=0;i<N;i++){double d=mex[i]-men[i]; s+=d; if(d>m)m=d;} printf("after last arrival: mean %.2f ms max %.1f ms\n", s/N*1e3, m*1e3);}
  if(r==0) printf("hogs=%d mode=%d mean per-rank allreduce incl. waiting for stragglers %.2f ms (r0 max %.1f)\n",hogs,mode,all/8/N*1e3,mx*1e3);
  MPI_Finalize();}
