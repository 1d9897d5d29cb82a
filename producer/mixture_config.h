/*
 * The mixture a job's config describes (docs/mixtures.md): its sources' weights or
 * groups, or its schedule, resolved to the exact integer weight sets of
 * producer/mixture.h.
 */
#ifndef SF_PRODUCER_MIXTURE_CONFIG_H
#define SF_PRODUCER_MIXTURE_CONFIG_H

#include "common/config.h"
#include "common/errors.h"
#include "producer/mixture.h"

/*
 * sf__mixture_from_config - the mixture of `cfg` (cfg->mixture set), with B * W samples
 * per step. Returns 0 and *ret_m (free with sf__mix_free()), or SF_E_CONFIG / -ENOMEM
 * with the reason in `e`.
 */
int sf__mixture_from_config(const struct sf_config *cfg, struct sf_mixture **ret_m,
			    struct sf_err *e);

#endif
