/* hyprof: spectral-spatial analysis of hyperspectral cubes on GPUs and CPUs.
 * The whole public interface. */
#ifndef HYPROF_H
#define HYPROF_H

#include "hyprof/attribute.h"
#include "hyprof/classify.h"
#include "hyprof/core.h"
#include "hyprof/diffusion.h"
#include "hyprof/morphology.h"
#include "hyprof/registry.h"
#include "hyprof/search.h"
#include "hyprof/spectral.h"
#include "hyprof/unmixing.h"
#include "hyprof/wavelet.h"

#endif
