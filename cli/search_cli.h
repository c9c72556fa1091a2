/* `hyprof train --search` (search.c), called by run_train (classify.c). */
#ifndef HYPROF_CLI_SEARCH_H
#define HYPROF_CLI_SEARCH_H

#include "job.h"

/* --search-report and --fold-map need --search (a usage error otherwise). */
int cli_train_check_search(job_t *j);
/* Searches the profile for `raw` and trains the model; prints the table of
 * candidates and writes the side outputs (not committed). Returns an exit code. */
int cli_train_search(job_t *j, const hyprof_raster_t *raw, const hyprof_cube_t *labels,
                     const hyprof_train_params_t *p, hyprof_classifier_t **model);

#endif
