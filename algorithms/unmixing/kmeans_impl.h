/* The CPU K-means' two files: kmeans.c (the initialisation, the centre
 * update, Lloyd's iterations) and kmeans_assign.c (the assignment). */
#ifndef HYPROF_KMEANS_IMPL_H
#define HYPROF_KMEANS_IMPL_H

#include "unmixing_impl.h"

#include <stddef.h>

/* The blocks of HYPROF_KMEANS_BLOCK pixels the centre sums are made of. */
static inline size_t hyprof__kmeans_blocks(const hyprof_kmeans_args_t *a)
{
    return (a->npix + HYPROF_KMEANS_BLOCK - 1) / HYPROF_KMEANS_BLOCK;
}

/* One past the last pixel of block blk. */
static inline size_t hyprof__kmeans_block_end(const hyprof_kmeans_args_t *a, size_t blk)
{
    size_t end = (blk + 1) * HYPROF_KMEANS_BLOCK;
    return end < a->npix ? end : a->npix;
}

/* The exact centre totals that changed labels move pixels between. */
typedef struct {
    double *tot; /* k x B */
    long long *cnt;
} hyprof_kmeans_totals_t;

/* The assignment's inputs and outputs besides the arguments. */
typedef struct {
    const double *mu, *aa;          /* the pre-pass's mean spectrum, |x - mu|^2 */
    int exact;                      /* every pixel's distance to its centre in dist */
    double *part;                   /* the blocks' centre sums, or NULL */
    hyprof_kmeans_totals_t *moves;  /* the totals the changed labels move in, or NULL */
    int lost;                       /* out: moves were not recorded (no memory) */
} hyprof_kmeans_assign_t;

/* Nearest centre of every pixel; returns how many labels changed. With
 * `part`, the centre sums of every block (one pass over the cube an
 * iteration instead of two); with `moves`, the changed labels' moves. */
size_t hyprof__kmeans_assign(const hyprof_kmeans_args_t *a, int threads,
                             hyprof_kmeans_assign_t *as);

/* All the bands' centre sums over pixels q0 .. q1 of block blk, in pixel
 * order (the block's sums start at zero with its first pixel). */
void hyprof__kmeans_range_sums(const hyprof_kmeans_args_t *a, double *part, size_t blk, size_t q0,
                               size_t q1);

#endif
