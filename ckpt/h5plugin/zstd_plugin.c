/* Entry points HDF5's plugin loader looks up in lib*.so files found on
 * HDF5_PLUGIN_PATH: this library provides filter 32015 (zstd). */
#include <H5PLextern.h>

#include "zstd_filter.h"

H5PL_type_t H5PLget_plugin_type(void) { return H5PL_TYPE_FILTER; }

const void* H5PLget_plugin_info(void) { return ckpt_zstd_filter_class(); }
