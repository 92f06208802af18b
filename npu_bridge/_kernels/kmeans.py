"""``KMeansCentroids`` / ``KMeansCentroidsV2``: one assignment step of k-means."""

import collections

import tensorflow as tf

__all__ = ["k_means_centroids", "k_means_centroids_v2"]

KMeansCentroids = collections.namedtuple("KMeansCentroids",
                                         ["segment_sum", "segment_count", "kmean_total_sum"])


def _k_means(x, y, sum_square_y, sum_square_x, name):
    with tf.name_scope(name):
        x = tf.convert_to_tensor(x, dtype=tf.float32, name="x")
        y = tf.convert_to_tensor(y, dtype=tf.float32, name="y")
        sum_square_y = tf.convert_to_tensor(sum_square_y, dtype=tf.float32, name="sum_square_y")
        for what, t in (("x", x), ("y", y)):
            if t.shape.rank not in (None, 2):
                raise ValueError(f"k_means_centroids: {what} must be 2-D, got shape {t.shape}")
        distance = tf.reshape(sum_square_y, [1, -1]) - 2.0 * tf.matmul(x, y, transpose_b=True)
        if sum_square_x is not None:
            sum_square_x = tf.convert_to_tensor(sum_square_x, dtype=tf.float32,
                                                name="sum_square_x")
            distance = distance + tf.reshape(sum_square_x, [-1, 1])
        nearest = tf.argmin(distance, axis=1, output_type=tf.int32)
        centroids = tf.shape(y)[0]
        segment_sum = tf.math.unsorted_segment_sum(x, nearest, centroids)
        counts = tf.math.unsorted_segment_sum(tf.ones_like(x[:, 0]), nearest, centroids)
        total = tf.reduce_sum(tf.reduce_min(distance, axis=1))
        return KMeansCentroids(segment_sum, tf.reshape(counts, [-1, 1]), tf.reshape(total, [1]))


def k_means_centroids(x, y, sum_square_y, sum_square_x, use_actual_distance=False, name=None):
    """``KMeansCentroids``: assign each sample (row of ``x``, ``[m, d]``) to its nearest centroid
    (row of ``y``, ``[n, d]``) by ``|y|^2 - 2 x.y + |x|^2`` (``sum_square_y`` ``[1, n]``,
    ``sum_square_x`` ``[m, 1]``).

    Returns ``(segment_sum [n, d], segment_count [n, 1], kmean_total_sum [1])``: the sum and
    number of the samples of each centroid and the sum of every sample's distance to its
    centroid. ``use_actual_distance`` is recorded; the distance includes ``|x|^2`` because
    ``sum_square_x`` is given.
    """
    return _k_means(x, y, sum_square_y, sum_square_x, name or "KMeansCentroids")


def k_means_centroids_v2(x, y, sum_square_y, use_actual_distance=False, name=None):
    """``KMeansCentroidsV2``: :func:`k_means_centroids` without ``sum_square_x``: the distance
    is ``|y|^2 - 2 x.y`` (the same nearest centroid; ``kmean_total_sum`` lacks ``sum |x|^2``)."""
    return _k_means(x, y, sum_square_y, None, name or "KMeansCentroidsV2")
