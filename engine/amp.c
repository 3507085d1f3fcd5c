/*
 * amp.c — the mixed-precision level and its low dtype.
 */
#include "te_internal.h"

static struct {
    te_amp_level level;
    te_dtype low;
} amp = { TE_AMP_O0, TE_F32 };

te_status te_amp_set(te_amp_level level, te_dtype low)
{
    if ((unsigned)level >= TE_AMP_LEVEL_COUNT) {
        te_set_error(TE_ERR_ARG, "amp: level %d is not one of O0, O1, O2, O3", (int)level);
        return TE_ERR_ARG;
    }
    if (level != TE_AMP_O0 && low != TE_F16 && low != TE_BF16) {
        te_set_error(TE_ERR_ARG, "amp: the low precision must be f16 or bf16, not %s", te_dtype_name(low));
        return TE_ERR_ARG;
    }
    amp.level = level;
    amp.low = level == TE_AMP_O0 ? TE_F32 : low;
    return TE_OK;
}

te_amp_level te_amp_level_get(void) { return amp.level; }

te_dtype te_amp_dtype(void) { return amp.low; }

const char *te_amp_level_name(te_amp_level level)
{
    static const char *const names[TE_AMP_LEVEL_COUNT] = { "O0", "O1", "O2", "O3" };
    return (unsigned)level < TE_AMP_LEVEL_COUNT ? names[level] : NULL;
}
