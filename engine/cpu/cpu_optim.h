/*
 * cpu_optim.h — the CPU backend's optimizer and loss-scaler services
 * (te_backend's sgd, adam, unscale and sumsq entries).
 */
#ifndef TE_CPU_OPTIM_H
#define TE_CPU_OPTIM_H

#include "../te_internal.h"

void cpu_sgd(const te_sgd_opts *o, const te_update_args *u, int count);
void cpu_adam(const te_adam_opts *o, int64_t t, const te_update_args *u, int count);
bool cpu_unscale(const te_unscale_args *u, int count, float inv);
double cpu_sumsq(const te_unscale_args *u, int count);

#endif
