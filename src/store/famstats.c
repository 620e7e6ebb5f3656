/*
 * famstats.c -- entries per limiter family (see famstats.h). Read-only: the walk takes the
 * registry lock (no table appears meanwhile) and each shard's lock in turn, never two at
 * once, so a decision waits at most one shard's walk (nslots entries).
 */
#include "store/famstats.h"

#include <stdlib.h>

#include "store/memory.h"

int sl_store_family_counts(sluice_store *st, sl_fam_count *out, size_t max) {
    if (st == NULL) return 0;
    uint64_t *count = calloc(SL_STORE_MAX_FAMILIES + 1, sizeof(uint64_t));
    if (count == NULL) return SLUICE_ENOMEM;
    pthread_mutex_lock(&st->reg_lock);
    for (unsigned i = 0; i < st->ntables; i++) {
        sl_table *t = st->tables[i];
        for (uint32_t s = 0; s < t->nshards; s++) {
            sl_shard *sh = &t->shards[s];
            const unsigned char *p = t->slots + (size_t)s * t->shard_bytes;
            sl_shard_lock(sh);
            if (sh->count > 0)
                for (uint64_t k = 0; k < t->nslots; k++, p += t->esize) {
                    uint16_t fam = ((const sl_ehdr *)(const void *)p)->fam;
                    if (fam != 0 && fam <= SL_STORE_MAX_FAMILIES) count[fam]++;
                }
            sl_shard_unlock(sh);
        }
    }
    int n = 0;
    for (uint32_t id = 1; id <= SL_STORE_MAX_FAMILIES; id++) {
        if (count[id] == 0) continue;
        sl_family *f = sl_store_family(st, (uint16_t)id);
        if (f == NULL) continue;
        if ((size_t)n < max) out[n] = (sl_fam_count){f->name, f->index, count[id]};
        n++;
    }
    pthread_mutex_unlock(&st->reg_lock);
    free(count);
    return n;
}
