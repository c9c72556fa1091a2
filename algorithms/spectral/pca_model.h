/* The PCA model's insides, shared by pca.c and pca_model.c. */
#ifndef HYPROF_PCA_MODEL_H
#define HYPROF_PCA_MODEL_H

#include "hyprof/spectral.h"

struct hyprof_pca_model {
    size_t bands, components, samples;
    double total_variance;
    double *mean;        /* bands */
    double *vectors;     /* components x bands, component-major */
    double *eigenvalues; /* components */
};

hyprof_pca_model_t *hyprof__pca_model_new(size_t bands, size_t components);

#endif
