/* HDF5 filter 32015 ("zstd"): one plain Zstandard frame per chunk.
 *
 * Shared by the dynamically loaded plugin (zstd_plugin.c, for h5dump/h5py via
 * HDF5_PLUGIN_PATH) and by ckpt itself, which registers the same class with
 * H5Zregister so HDF5 accepts and reads datasets declaring the filter.
 *
 * Encode: level cd_values[0] (default 3). Decode: the frame must decode
 * completely; frames without a content size are decoded by streaming.
 * Failure returns 0 (HDF5's filter convention). Reentrant: no global state.
 * The code calls no HDF5 functions, so the plugin need not link libhdf5. */
#ifndef CKPT_H5PLUGIN_ZSTD_FILTER_H_
#define CKPT_H5PLUGIN_ZSTD_FILTER_H_

#include <hdf5.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CKPT_ZSTD_FILTER_ID 32015
#define CKPT_ZSTD_DEFAULT_LEVEL 3

/* The filter class (version H5Z_CLASS_T_VERS, id 32015, name "zstd"). */
const H5Z_class2_t* ckpt_zstd_filter_class(void);

#ifdef __cplusplus
}
#endif

#endif /* CKPT_H5PLUGIN_ZSTD_FILTER_H_ */
