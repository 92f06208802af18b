"""Host and AI CPU ops (``npu_bridge.npu_cpu.npu_cpu_ops``), built from TensorFlow ops.

Every public function has the original's name and arguments and builds the op from TensorFlow
ops (a few geometric OCR steps run NumPy through ``tf.numpy_function``). The definitions of what
each op computes are in the modules that implement them and in ``docs/api-modules.md``:

* image warps — ``dense_image_warp`` (with its gradient ``dense_image_warp_grad``),
  ``resize_v2``, ``warp_affine_v2``: :mod:`npu_bridge.npu_cpu._image`;
* random — ``randomchoicewithmask``, ``stateless_random_choice_with_mask``,
  ``stateless_dropout``: :mod:`npu_bridge.npu_cpu._random`;
* index — ``embeddingrankid``, ``embedding_local_index``, ``non_zero_with_value_shape(_v2)``:
  :mod:`npu_bridge.npu_cpu._index`;
* embedding hash tables and feature mapping: :mod:`npu_bridge.npu_cpu._tables`;
* batching queues — ``batch_enqueue``, ``dequeue``: :mod:`npu_bridge.npu_cpu._queue`;
* OCR pre/post-processing: :mod:`npu_bridge.npu_cpu._ocr`.

The op implementations are also registered on the op handle, so
``gen_npu_cpu_ops.dense_image_warp(image=..., flow=...)`` works as with the original's generated
module. Where the original wrapper passes ``interploation`` (sic) the public argument keeps that
spelling.
"""

import json  # noqa: F401 - the original module exports it

import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2  # noqa: F401 - re-exported as the original

from npu_bridge.helper import helper
from npu_bridge.npu_cpu import _image, _index, _ocr, _queue, _random, _tables

__all__ = [
    "batch_dilate_polys", "batch_enqueue", "deinit_embedding_hashmap_v2", "dense_image_warp",
    "dense_image_warp_grad", "dequeue", "device_feature_mapping",
    "embedding_hash_table_export", "embedding_hash_table_import", "embedding_hashmap_export_v2",
    "embedding_hashmap_file_size_v2", "embedding_hashmap_import_v2",
    "embedding_hashmap_table_size_v2", "embedding_hashtable_apply_adam_w",
    "embedding_hashtable_lookup_or_insert", "embedding_local_index", "embeddingrankid",
    "gen_npu_cpu_ops", "host_feature_mapping", "init_embedding_hashmap_v2",
    "init_embedding_hashtable", "non_zero_with_value_shape", "non_zero_with_value_shape_v2",
    "ocr_detection_post_handle", "ocr_detection_pre_handle", "ocr_find_contours",
    "ocr_identify_pre_handle", "ocr_recognition_pre_handle", "randomchoicewithmask",
    "resize_and_clip_polys", "resize_v2", "stateless_dropout",
    "stateless_random_choice_with_mask", "table_to_resource_v2", "warp_affine_v2",
]

compat = tf.compat  # re-exported as the original (TensorFlow's internal ``ops`` is not)


def _device_feature_mapping(feature_id, name=None):
    return _tables.feature_mapping(feature_id, 1, "__device_feature_mapping__", tf.int32,
                                   "device_feature_mapping", name=name)


def _host_feature_mapping(feature_id, threshold=1, table_name="default_table_name", name=None):
    return _tables.feature_mapping(feature_id, threshold, table_name, tf.int64,
                                   "host_feature_mapping", name=name)


helper.register_gen_ops({
    "EmbeddingRankId": _index.embedding_rank_id,
    "EmbeddingLocalIndex": _index.embedding_local_index,
    "RandomChoiceWithMask": _random.random_choice_with_mask,
    "StatelessRandomChoiceWithMask": _random.stateless_random_choice_with_mask,
    "StatelessDropout": _random.stateless_dropout,
    "DenseImageWarp": _image.dense_image_warp,
    "DenseImageWarpGrad": _image.dense_image_warp_backward,
    "ResizeV2": _image.resize_v2,
    "WarpAffineV2": _image.warp_affine_v2,
    "NonZeroWithValueShape": _index.non_zero_with_value_shape,
    "NonZeroWithValueShapeV2": _index.non_zero_with_value_shape,
    "BatchEnqueue": _queue.batch_enqueue,
    "Dequeue": _queue.dequeue,
    "OCRRecognitionPreHandle": _ocr.ocr_recognition_pre_handle,
    "OCRDetectionPreHandle": _ocr.ocr_detection_pre_handle,
    "OCRIdentifyPreHandle": _ocr.ocr_identify_pre_handle,
    "BatchDilatePolys": _ocr.batch_dilate_polys,
    "OCRFindContours": _ocr.ocr_find_contours,
    "OCRDetectionPostHandle": _ocr.ocr_detection_post_handle,
    "ResizeAndClipPolys": _ocr.resize_and_clip_polys,
    "HostFeatureMapping": _host_feature_mapping,
    "EmbeddingFeatureMapping": _device_feature_mapping,
    "InitEmbeddingHashmapV2": _tables.init_table,
    "DeinitEmbeddingHashmapV2": _tables.deinit_table,
    "TableToResourceV2": _tables.table_to_resource,
    "EmbeddingHashmapSize": _tables.table_sizes,
    "EmbeddingHashmapExport": _tables.file_export,
    "EmbeddingHashmapFileSize": _tables.file_sizes,
    "EmbeddingHashmapImport": _tables.file_import,
    "InitEmbeddingHashTable": _tables.init_hashtable,
    "EmbeddingHashTableImport": _tables.import_tables,
    "EmbeddingHashTableExport": _tables.export_tables,
    "EmbeddingHashTableLookupOrInsert": _tables.lookup_or_insert,
    "EmbeddingHashTableApplyAdamW": _tables.apply_adam_w,
})
gen_npu_cpu_ops = helper.get_gen_ops()


def embedding_hashtable_lookup_or_insert(table_handle, keys, bucket_size, embedding_dim,
                                         filter_mode, filter_freq, default_key_or_value,
                                         default_key, default_value, filter_key_flag,
                                         filter_key):
    """Rows of ``keys`` from the table, admitting new keys (float32 ``[n, embedding_dim]``)."""
    return _tables.lookup_or_insert(table_handle, keys, bucket_size, embedding_dim, filter_mode,
                                    filter_freq, default_key_or_value, default_key,
                                    default_value, filter_key_flag, filter_key)


def embeddingrankid(addr_tensor, index, row_memory=320, mode="mod"):
    """Remote-read descriptor ``(rank_id, address, row_memory)`` of each index."""
    return _index.embedding_rank_id(addr_tensor, index, row_memory, mode)


def embedding_local_index(addr_tensor, index, row_memory=320, mode="mod"):
    """``(local_idx, nums, recover_idx)``: local rows by server, rows per server, positions."""
    return _index.embedding_local_index(addr_tensor, index, row_memory, mode)


def randomchoicewithmask(x, count, seed=0, seed2=0):
    """``(y, mask)``: ``count`` random coordinates of the true elements of ``x``."""
    return _random.random_choice_with_mask(x, count, seed, seed2)


def dense_image_warp(image, flow, name=None):
    """``image`` warped by the dense ``flow`` (bilinear); differentiable."""
    return _image.dense_image_warp(image, flow, name=name)


def stateless_dropout(x, noise_shape, p, seed, offset):
    """Dropout with drop probability ``p`` drawn from the stateless generator
    ``[seed, offset]``."""
    return _random.stateless_dropout(x, noise_shape, p, seed, offset)


def dense_image_warp_grad(op, grad):
    """``[grad_image, grad_flow]`` of a dense image warp: ``op.inputs`` are ``(image,
    flow)``. :func:`dense_image_warp` already differentiates through this; the function is
    public for code that registers or calls the original's gradient."""
    image, flow = op.inputs[0], op.inputs[1]
    grad_image, grad_flow = _image.dense_image_warp_backward(grad, image, flow)
    return [grad_image, grad_flow]


def batch_enqueue(x, queue_id=0, batch_size=8, queue_name="", queue_depth=100,
                  pad_mode="REPLICATE"):
    """Enqueue ``x`` in padded batches; the number of batches in the queue (int32)."""
    return _queue.batch_enqueue(x, queue_id, batch_size, queue_name, queue_depth, pad_mode)


def ocr_recognition_pre_handle(imgs_data, imgs_offset, imgs_size, langs, langs_score,
                               batch_size=8, data_format="NHWC", pad_mode="REPLICATE"):
    """``(imgs, imgs_relation, imgs_lang, imgs_piece_fillers)``: images batched by language."""
    return _ocr.ocr_recognition_pre_handle(imgs_data, imgs_offset, imgs_size, langs,
                                           langs_score, batch_size, data_format, pad_mode)


def ocr_detection_pre_handle(img, data_format="NHWC"):
    """``(resized_img, h_scale, w_scale)``: the image resized for text detection."""
    return _ocr.ocr_detection_pre_handle(img, data_format)


def ocr_identify_pre_handle(imgs_data, imgs_offset, imgs_size, size, data_format="NHWC"):
    """Every image of the set resized to ``size``."""
    return _ocr.ocr_identify_pre_handle(imgs_data, imgs_offset, imgs_size, size, data_format)


def batch_dilate_polys(polys_data, polys_offset, polys_size, score, min_border, min_area_thr,
                       score_thr, expand_scale):
    """``(dilated_polys_data, dilated_polys_offset, dilated_polys_size)``."""
    return _ocr.batch_dilate_polys(polys_data, polys_offset, polys_size, score, min_border,
                                   min_area_thr, score_thr, expand_scale)


def ocr_find_contours(img, value_mode=0):
    """``(polys_data, polys_offset, polys_size)``: outer contours of a binary image."""
    return _ocr.ocr_find_contours(img, value_mode)


def dequeue(queue_id, output_type, output_shape, queue_name=""):
    """One batch from the queue, with ``output_shape``."""
    return _queue.dequeue(queue_id, output_type, output_shape, queue_name)


def ocr_detection_post_handle(img, polys_data, polys_offset, polys_size, data_format="NHWC"):
    """``(imgs_data, imgs_offset, imgs_size, rect_points)``: crops of the polygons."""
    return _ocr.ocr_detection_post_handle(img, polys_data, polys_offset, polys_size,
                                          data_format)


def warp_affine_v2(x, matrix, dst_size, interploation="INTEL_BILINEAR",
                   border_type="BORDER_CONSTANT", border_value=0):
    """The image ``x`` warped by the affine ``matrix`` to ``dst_size``."""
    return _image.warp_affine_v2(x, matrix, dst_size, interploation, border_type, border_value)


def resize_v2(x, dst_size, interploation="INTEL_BILINEAR"):
    """The image ``x`` resized to ``dst_size`` = [height, width]."""
    return _image.resize_v2(x, dst_size, interploation)


def resize_and_clip_polys(polys_data, polys_offset, polys_size, h_scale, w_scale, img_h, img_w):
    """``(clipped_polys_data, clipped_polys_offset, clipped_polys_size, clipped_polys_num)``."""
    return _ocr.resize_and_clip_polys(polys_data, polys_offset, polys_size, h_scale, w_scale,
                                      img_h, img_w)


def non_zero_with_value_shape(value, index, count):
    """``(out_value, out_index)``: the valid part of ``NonZeroWithValue``'s outputs."""
    return _index.non_zero_with_value_shape(value, index, count)


def non_zero_with_value_shape_v2(value, index, count):
    """Same as :func:`non_zero_with_value_shape` (the device's second kernel)."""
    return _index.non_zero_with_value_shape(value, index, count, name="NonZeroWithValueShapeV2")


def host_feature_mapping(feature_id, threshold=1, table_name="default_table_name"):
    """int64 dense offsets of the feature ids in the named mapping (-1 until admitted)."""
    return _host_feature_mapping(feature_id, threshold, table_name)


def device_feature_mapping(feature_id):
    """int32 dense offsets of the feature ids in the device mapping."""
    return _device_feature_mapping(feature_id)


def init_embedding_hashmap_v2(table_id, bucket_size, load_factor, embedding_dim, dtype):
    """Create embedding table ``table_id``; returns its int64 handle."""
    return _tables.init_table(table_id, bucket_size, load_factor, embedding_dim, dtype)


def deinit_embedding_hashmap_v2(table_id):
    """An op that empties table ``table_id``."""
    return _tables.deinit_table(table_id)


def table_to_resource_v2(table_id, bucket_size, load_factor, embedding_dim, dtype):
    """The handle of the existing table ``table_id`` (the other arguments are checked against
    it)."""
    handle = _tables.table_to_resource(table_id)
    table = _tables._table(int(tf.get_static_value(handle)), "table_to_resource_v2")
    _tables._check_config(table, "table_to_resource_v2", bucket_size, embedding_dim)
    return handle


def embedding_hashmap_table_size_v2(table_ids, filter_export_flag, export_mode):
    """int64 number of keys an export of each table would give."""
    return _tables.table_sizes(table_ids, filter_export_flag, export_mode)


def embedding_hashmap_export_v2(file_path, table_ids, table_names, global_step, keys, counters,
                                filter_flag, values, num):
    """An op writing each table's exported data to ``file_path``."""
    return _tables.file_export(file_path, table_ids, table_names, global_step, keys, counters,
                               filter_flag, values, num)


def embedding_hashmap_file_size_v2(file_path, table_ids, table_names, global_step,
                                   embedding_dims):
    """int64 number of keys in each table's file."""
    return _tables.file_sizes(file_path, table_ids, table_names, global_step, embedding_dims)


def embedding_hashmap_import_v2(file_path, table_ids, table_sizes, table_names, global_step,
                                embedding_dims, num):
    """``(keys, counters, filter_flags, values)`` lists read from ``file_path``."""
    return _tables.file_import(file_path, table_ids, table_sizes, table_names, global_step,
                               embedding_dims, num)


def init_embedding_hashtable(table_handle, sampled_values, bucket_size, embedding_dim,
                             initializer_mode, constant_value):
    """An op setting how the table initialises new rows."""
    return _tables.init_hashtable(table_handle, sampled_values, bucket_size, embedding_dim,
                                  initializer_mode, constant_value)


def embedding_hash_table_import(table_handles, embedding_dims, bucket_sizes, keys, counters,
                                filter_flags, values):
    """An op inserting exported data into the tables."""
    return _tables.import_tables(table_handles, embedding_dims, bucket_sizes, keys, counters,
                                 filter_flags, values)


def stateless_random_choice_with_mask(x, count, seed, offset):
    """``(y, mask)``: ``count`` coordinates of the true elements of ``x``, chosen by the
    stateless generator ``[seed, offset]``."""
    return _random.stateless_random_choice_with_mask(x, count, seed, offset)


def embedding_hash_table_export(table_handles, table_sizes, embedding_dims, bucket_sizes,
                                export_mode="all", filter_export_flag=False):
    """``(keys, counters, filter_flags, values)`` lists, one tensor per table."""
    return _tables.export_tables(table_handles, table_sizes, embedding_dims, bucket_sizes,
                                 export_mode, filter_export_flag)


def embedding_hashtable_apply_adam_w(table_handle, keys, m, v, beta1_power, beta2_power, lr,
                                     weight_decay, beta1, beta2, epsilon, grad, max_grad_norm,
                                     embedding_dim, bucket_size, amsgrad, maximize):
    """An op applying AdamW to the table rows of ``keys``."""
    return _tables.apply_adam_w(table_handle, keys, m, v, beta1_power, beta2_power, lr,
                                weight_decay, beta1, beta2, epsilon, grad, max_grad_norm,
                                embedding_dim, bucket_size, amsgrad, maximize)
