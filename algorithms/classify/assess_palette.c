/* The default colours of classes that the training data leave uncoloured.
 *
 * A fixed list of 24 colours that stay distinct for the common forms of
 * colour-blindness: the seven colours of Okabe and Ito (their eighth, black,
 * is left out: it reads as "no data" on a map), then Paul Tol's "muted" set
 * (nine colours, without its pale grey for bad data), then Paul Tol's "light"
 * set (eight colours, without its pale grey). Class v (1, 2, ...) takes entry
 * (v - 1) mod 24 as it is for v <= 24, mixed 40 % towards black for
 * 25 <= v <= 48 and 40 % towards white for 49 <= v <= 72; then the three rounds
 * repeat. The colour depends on the class number only, so one class keeps its
 * colour across maps, models and runs. docs/classmaps.md lists the colours. */
#include "hyprof/classify.h"

#include <math.h>

static const uint8_t palette[][3] = {
    /* Okabe-Ito */
    {230, 159, 0},   /* orange */
    {86, 180, 233},  /* sky blue */
    {0, 158, 115},   /* bluish green */
    {240, 228, 66},  /* yellow */
    {0, 114, 178},   /* blue */
    {213, 94, 0},    /* vermillion */
    {204, 121, 167}, /* reddish purple */
    /* Paul Tol, muted */
    {204, 102, 119}, /* rose */
    {51, 34, 136},   /* indigo */
    {221, 204, 119}, /* sand */
    {17, 119, 51},   /* green */
    {136, 204, 238}, /* cyan */
    {136, 34, 85},   /* wine */
    {68, 170, 153},  /* teal */
    {153, 153, 51},  /* olive */
    {170, 68, 153},  /* purple */
    /* Paul Tol, light */
    {119, 170, 221}, /* light blue */
    {238, 136, 102}, /* orange */
    {238, 221, 136}, /* light yellow */
    {255, 170, 187}, /* pink */
    {153, 221, 255}, /* light cyan */
    {68, 187, 153},  /* mint */
    {187, 204, 51},  /* pear */
    {170, 170, 0},   /* olive */
};

#define PALETTE_SIZE (sizeof palette / sizeof palette[0])

size_t hyprof_palette_size(void)
{
    return PALETTE_SIZE;
}

void hyprof_palette_rgba(size_t v, uint8_t rgba[4])
{
    if (v == 0) {
        rgba[0] = rgba[1] = rgba[2] = rgba[3] = 0;
        return;
    }
    const uint8_t *c = palette[(v - 1) % PALETTE_SIZE];
    size_t round = ((v - 1) / PALETTE_SIZE) % 3;
    for (int i = 0; i < 3; i++) {
        double x = c[i];
        if (round == 1)
            x *= 0.6;
        else if (round == 2)
            x += 0.4 * (255.0 - x);
        rgba[i] = (uint8_t)lround(x);
    }
    rgba[3] = 255;
}
