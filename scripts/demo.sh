#!/usr/bin/env bash
# The main job on the bundled sample: installs and builds hyprof, then extracts
# PCA and wavelet features and the EADP and EAP profiles of the Indian Pines
# cube, and the endmembers and abundances of the Samson cube (samples/).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
out="${HYPROF_DEMO_OUT:-demo-output}"
mkdir -p "$out"
hyprof=./build/cli/hyprof
$hyprof pca --components 7 --save-model "$out/indian_pines.pca" --overwrite \
  samples/indian_pines.tif "$out/indian_pines_pca.tif"
$hyprof dwt --wavelet haar --levels 4 --overwrite \
  samples/indian_pines.tif "$out/indian_pines_dwt.tif"
$hyprof eadp --components 7 --count 8 --step 65 --overwrite \
  samples/indian_pines.tif "$out/indian_pines_eadp.tif"
$hyprof eap --overwrite samples/indian_pines.tif "$out/indian_pines_eap.tif"
$hyprof unmix --endmembers 3 --sspp --overwrite samples/samson.tif "$out/samson_unmix.tif"
echo
echo "outputs in $(cd "$out" && pwd):"
for f in indian_pines_pca.tif indian_pines_dwt.tif indian_pines_eadp.tif indian_pines_eap.tif \
         indian_pines.pca samson_unmix.tif samson_unmix.csv samson_unmix.json; do
  echo "  $out/$f"
done
echo "inspect them with: $hyprof info $out/indian_pines_pca.tif  (or gdalinfo, or QGIS)"
