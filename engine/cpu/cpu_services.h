/* cpu_services.h — the CPU backend's memory and service entries
 * (cpu_services.c), for its table in backend_cpu.c. */
#ifndef TE_CPU_SERVICES_H
#define TE_CPU_SERVICES_H

#include "te_internal.h"

void *cpu_alloc(size_t bytes);
void cpu_free(void *p);
void cpu_to_host(void *host_dst, const void *src, size_t bytes);
void cpu_from_host(void *dst, const void *host_src, size_t bytes);
void cpu_copy(void *dst, const void *src, size_t bytes);
void cpu_zero(void *p, size_t bytes);
void cpu_sync(void);
void cpu_stats(const te_tensor *t, te_stats *s, bool quick);
bool cpu_has_nonfinite(const te_tensor *t);
void cpu_watch_flag(const te_tensor *t, unsigned kinds, int slot);
int cpu_watch_take(int n);

#endif
