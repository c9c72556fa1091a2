#!/usr/bin/env bash
# The main job on the bundled sample: installs and builds hyprof, then extracts
# PCA and wavelet features and the EADP and EAP profiles of the Indian Pines
# cube (samples/), closes the loop (an SVM trained on the EADP profile with
# the EADP paper's Table I training pixels, the class map, its accuracy) and
# unmixes the Samson cube (endmembers and abundances).
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
$hyprof wmcd --overwrite samples/indian_pines.tif "$out/indian_pines_wmcd.tif"
$hyprof train --labels samples/indian_pines_train.tif --overwrite \
  "$out/indian_pines_eadp.tif" "$out/indian_pines_eadp.model"
$hyprof classify --model "$out/indian_pines_eadp.model" --overwrite \
  "$out/indian_pines_eadp.tif" "$out/indian_pines_classes.tif"
$hyprof assess --reference samples/indian_pines_test.tif --html "$out/indian_pines_report.html" \
  --overwrite "$out/indian_pines_classes.tif"
$hyprof unmix --endmembers 3 --sspp --overwrite samples/samson.tif "$out/samson_unmix.tif"
GDAL_DRIVER_PATH=build/gdal_driver gdal_translate -q samples/eadp_profile.vrt "$out/samson_eadp_gdal.tif"
GDAL_DRIVER_PATH=build/gdal_driver gdal_translate -q --config HYPROF_MODEL_PATH samples \
  samples/classmap.vrt "$out/indian_pines_classes_gdal.tif"
echo
echo "outputs in $(cd "$out" && pwd):"
for f in indian_pines_pca.tif indian_pines_dwt.tif indian_pines_eadp.tif indian_pines_eap.tif \
         indian_pines_wmcd.tif indian_pines.pca indian_pines_eadp.model indian_pines_classes.tif \
         indian_pines_report.html samson_unmix.tif samson_unmix.csv samson_unmix.json \
         samson_eadp_gdal.tif indian_pines_classes_gdal.tif; do
  echo "  $out/$f"
done
echo "inspect them with: $hyprof info $out/indian_pines_pca.tif  (or gdalinfo, or QGIS)"
