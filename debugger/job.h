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

#endif
