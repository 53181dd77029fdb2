// Test mode: with LMDBIO_CAFFE_KEY_LOG=DIR, every key handed to Caffe is
// appended (hex, one per line) to DIR/rank-R.keys, R being the MPI rank.
// Tests use it to check that ranks' records are disjoint and cover the
// database. Off (and free) otherwise.
#ifndef LMDBIO_CAFFE_KEY_LOG_HPP
#define LMDBIO_CAFFE_KEY_LOG_HPP

#include <cstddef>

namespace lmdbio_caffe {

bool key_log_enabled();
void log_key(const void* key, std::size_t len);

}  // namespace lmdbio_caffe

#endif
