/*
 * job.h — `tdbg --mpi -- mpirun ...`: one debugger for every rank of a
 * data-parallel job (job.c; docs/debugger.md "Data-parallel jobs").
 */
#ifndef TDBG_JOB_H
#define TDBG_JOB_H

#include <stdbool.h>

/* Runs argv (mpirun and its arguments) with every rank waiting for this
 * process, connects to each rank's session and drives them as one:
 * script holds the -x/-ex lines, one per line ("" for none); batch runs
 * only those; plugin is the debugger library the ranks load. Returns the
 * launcher's exit status (docs/debugger.md). */
int tdbg_job_main(char **argv, const char *script, bool batch, const char *plugin);

/* `tdbg attach --mpi PID,PID,...`: the same session over every rank of a
 * running job started with TDBG_LISTEN=1, the pids in any order (WELCOME
 * says each one's rank). 2 with a message when the pids are not the
 * whole of one listening job; else 0 after a detach, 1 when the job
 * ended while attached (docs/attach.md). */
int tdbg_job_attach(const char *pids, const char *script, bool batch);

#endif
